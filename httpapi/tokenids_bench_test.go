package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

// tokenArrays are 64 distinct 4k-token JSON arrays for each of two id
// distributions, kvbench's (uniform over a 50,000-id vocabulary: mostly 5
// digits, some 4) and a Zipf law over Qwen's 151,936-id vocabulary
// (frequent words have small ids: 1 to 6 digits, mixed), each written
// compact (`1,2,3`, JavaScript's JSON.stringify, Go's encoding/json) and
// as Python's json.dumps writes it by default (`1, 2, 3`). The benchmark
// goes round the 64: parsing one array over and over, the branch
// predictor learns its pattern of lengths, which a router serving
// distinct prompts never sees.
func tokenArrays() map[string][][]byte {
	const n, distinct = 4096, 64
	out := map[string][][]byte{}
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, 151935)
	r := rand.New(rand.NewPCG(5, 6))
	for range distinct {
		uniform, zipf := make([]uint32, n), make([]uint32, n)
		for i := range n {
			uniform[i] = 1 + uint32(r.IntN(50_000-1))
			zipf[i] = uint32(z.Uint64())
		}
		for _, sep := range []string{",", ", "} {
			style := "compact"
			if sep != "," {
				style = "python"
			}
			out["uniform/"+style] = append(out["uniform/"+style], tokenArray(uniform, sep))
			out["zipf/"+style] = append(out["zipf/"+style], tokenArray(zipf, sep))
		}
	}
	return out
}

func tokenArray(ids []uint32, sep string) []byte {
	b := []byte{'['}
	for i, id := range ids {
		if i > 0 {
			b = append(b, sep...)
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return append(b, ']')
}

// BenchmarkTokenIDs4kDistinct reports the parser and the one it replaced
// (a loop over every byte; bytewiseTokenIDs below) side by side.
func BenchmarkTokenIDs4kDistinct(b *testing.B) {
	parsers := []struct {
		name  string
		parse func(*TokenIDs, []byte) error
	}{
		{"swar", (*TokenIDs).UnmarshalJSON},
		{"bytewise", bytewiseTokenIDs},
	}
	for _, dist := range []string{"uniform/compact", "uniform/python", "zipf/compact", "zipf/python"} {
		arrays := tokenArrays()[dist]
		for _, p := range parsers {
			b.Run(dist+"/"+p.name, func(b *testing.B) {
				var bytes int64
				for _, a := range arrays {
					bytes += int64(len(a))
				}
				b.SetBytes(bytes / int64(len(arrays)))
				var t TokenIDs
				i := 0
				for b.Loop() {
					if err := p.parse(&t, arrays[i%len(arrays)]); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// The parser must read every array of the benchmark as the bytewise
// parser does.
func TestTokenIDsAgreeWithBytewise(t *testing.T) {
	for dist, arrays := range tokenArrays() {
		for k, a := range arrays[:8] {
			var fast, slow TokenIDs
			if err := fast.UnmarshalJSON(a); err != nil {
				t.Fatalf("%s %d: %v", dist, k, err)
			}
			if err := bytewiseTokenIDs(&slow, a); err != nil {
				t.Fatalf("%s %d: bytewise: %v", dist, k, err)
			}
			if len(fast) != 4096 || fmt.Sprint(fast) != fmt.Sprint(slow) {
				t.Fatalf("%s %d: %d ids, differ from the bytewise parser's", dist, k, len(fast))
			}
		}
	}
}

// bytewiseTokenIDs is the parser before the SWAR fast path (stop 24's
// one pass with one branch per byte), kept to compare against.
func bytewiseTokenIDs(t *TokenIDs, b []byte) error {
	b = trimJSONSpace(b)
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return errors.New("token_ids must be an array of integers")
	}
	body := b[1 : len(b)-1]
	out := (*t)[:0]
	if want := len(body)/5 + 1; cap(out) < want {
		out = make([]uint32, 0, want)
	}
	expectValue := true
	for i := 0; i < len(body); {
		c := body[i]
		switch {
		case c-'0' <= 9:
			if !expectValue {
				return errors.New("want a non-negative integer")
			}
			start := i
			v := uint64(c - '0')
			for i++; i < len(body); i++ {
				d := body[i] - '0'
				if d > 9 {
					break
				}
				v = v*10 + uint64(d)
			}
			digits := i - start
			if c == '0' && digits > 1 || digits > 10 || v > 1<<32-1 {
				return errors.New("want a uint32")
			}
			out = append(out, uint32(v))
			expectValue = false
		case c == ',':
			if expectValue {
				return errors.New("want a non-negative integer")
			}
			expectValue = true
			i++
		case isSpace(c):
			i++
		default:
			return errors.New("want a non-negative integer")
		}
	}
	if expectValue && len(out) > 0 {
		return errors.New("token_ids: trailing comma")
	}
	*t = out
	return nil
}

// Every case the eight-byte path hands back to the byte loop (a number of
// eight or more digits, a leading zero, a value past uint32, a space
// before a comma, two spaces, a tab or a newline, a missing or doubled
// comma, a sign) is put at every position of a 40-id array, compact and
// spaced, so it lands at every offset of a load and on either side of
// the hand-over near the end; the result must be encoding/json's.
func TestTokenIDsEdgesAtEveryPosition(t *testing.T) {
	edges := []string{
		"1234567", "12345678", "123456789", "4294967295", "4294967296", "0", "00", "07",
		"5 ,6", "5,  6", "5,\t6", "5,\n6", "5 6", "5,,6", "-1", "1.5", "1e3", "\"7\"",
	}
	for _, sep := range []string{",", ", "} {
		for _, edge := range edges {
			for pos := range 40 {
				var b []byte
				b = append(b, '[')
				for k := range 40 {
					if k > 0 {
						b = append(b, sep...)
					}
					if k == pos {
						b = append(b, edge...)
					} else {
						b = strconv.AppendUint(b, uint64(k*7919%100000), 10)
					}
				}
				b = append(b, ']')
				var got TokenIDs
				err := got.UnmarshalJSON(b)
				var want []uint32
				wantErr := json.Unmarshal(b, &want)
				if (err == nil) != (wantErr == nil) {
					t.Fatalf("%s: err %v, encoding/json's %v", b, err, wantErr)
				}
				if err == nil && fmt.Sprint([]uint32(got)) != fmt.Sprint(want) {
					t.Fatalf("%s: got %v, encoding/json %v", b, got, want)
				}
			}
		}
	}
}
