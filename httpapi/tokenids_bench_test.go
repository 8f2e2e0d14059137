package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/kvrouter/kvrouter/internal/testutil"
)

// tokenArrays are testutil.TokenPrompts' 64 distinct 4k-token prompts of
// kvbench's ids (uniform: mostly 5 digits, some 4) and of Zipf ids (1 to
// 6 digits, mixed) as JSON arrays, each written compact (`1,2,3`:
// JavaScript's JSON.stringify, Go's encoding/json) and as Python's
// json.dumps writes them by default (`1, 2, 3`).
func tokenArrays() map[string][][]byte {
	out := map[string][][]byte{}
	for dist, prompts := range testutil.TokenPrompts(4096, 64) {
		if dist == "bench" {
			continue
		}
		for _, ids := range prompts {
			out[dist+"/compact"] = append(out[dist+"/compact"], tokenArray(ids, ","))
			out[dist+"/python"] = append(out[dist+"/python"], tokenArray(ids, ", "))
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

// BenchmarkTokenIDs4kDistinct reports the parser and the byte loop alone
// (the parser before the eight-byte path) side by side. Parsing one array
// over and over, the branch predictor learns its pattern of id lengths,
// which a router serving distinct prompts never sees: it goes round 64.
func BenchmarkTokenIDs4kDistinct(b *testing.B) {
	parsers := []struct {
		name  string
		parse func(*TokenIDs, []byte) error
	}{
		{"swar", (*TokenIDs).UnmarshalJSON},
		{"bytewise", bytewiseTokenIDs},
	}
	all := tokenArrays()
	for _, dist := range []string{"uniform/compact", "uniform/python", "zipf/compact", "zipf/python"} {
		arrays := all[dist]
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

// bytewiseTokenIDs is the parser with every byte through the byte loop,
// as it was before the eight-byte path.
func bytewiseTokenIDs(t *TokenIDs, b []byte) error { return t.parse(b, false) }

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

// BenchmarkRouteBodyStrict is a /route body's decode: the whole body (4k
// token ids by the fast path, the rest strictly), and the remainder alone
// strictly and by json.Unmarshal, which accepts unknown keys: the
// difference is what refusing them costs per request.
func BenchmarkRouteBodyStrict(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString(`{"request_id":"req-000123","update_states":true,"lora_name":"","session_id":"s-42","token_ids":[`)
	for i := 0; i < 4096; i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(strconv.Itoa(1000 + i*37%150000))
	}
	buf.WriteString(`]}`)
	body := buf.Bytes()
	rest := []byte(`{"request_id":"req-000123","update_states":true,"lora_name":"","token_ids":null}`)
	b.Run("body", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var rb RouteBody
			if err := unmarshalWithTokens(body, &rb, &rb.TokenIDs, "session_id"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remainder_strict", func(b *testing.B) {
		for b.Loop() {
			var rb RouteBody
			if err := unmarshalStrict(rest, &rb, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remainder_lenient", func(b *testing.B) {
		for b.Loop() {
			var rb RouteBody
			if err := json.Unmarshal(rest, &rb); err != nil {
				b.Fatal(err)
			}
		}
	})
}
