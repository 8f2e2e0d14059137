package tokenwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// referenceDecode is protobuf's reading of a packed uint32 payload, one
// protowire call per varint.
func referenceDecode(b []byte) ([]uint32, error) {
	var out []uint32
	for len(b) > 0 {
		v, k := protowire.ConsumeVarint(b)
		if k < 0 {
			return nil, errors.New("malformed")
		}
		out = append(out, uint32(v))
		b = b[k:]
	}
	return out, nil
}

func referenceEncode(ids []uint32) []byte {
	var b []byte
	for _, v := range ids {
		b = protowire.AppendVarint(b, uint64(v))
	}
	return b
}

func TestKnownEncodings(t *testing.T) {
	for _, tc := range []struct {
		id   uint32
		wire []byte
	}{
		{0, []byte{0x00}},
		{1, []byte{0x01}},
		{127, []byte{0x7f}},
		{128, []byte{0x80, 0x01}},
		{300, []byte{0xac, 0x02}},
		{16383, []byte{0xff, 0x7f}},
		{16384, []byte{0x80, 0x80, 0x01}},
		{151935, []byte{0xff, 0xa2, 0x09}}, // Qwen's last id
		{1 << 21, []byte{0x80, 0x80, 0x80, 0x01}},
		{1 << 28, []byte{0x80, 0x80, 0x80, 0x80, 0x01}},
		{math.MaxUint32, []byte{0xff, 0xff, 0xff, 0xff, 0x0f}},
	} {
		if got := AppendEncoded(nil, []uint32{tc.id}); !bytes.Equal(got, tc.wire) {
			t.Errorf("encode %d: %x, want %x", tc.id, got, tc.wire)
		}
		if got := Size([]uint32{tc.id}); got != len(tc.wire) {
			t.Errorf("size %d: %d, want %d", tc.id, got, len(tc.wire))
		}
		// Alone (the tail path) and followed by 8 more bytes (the fast path).
		for _, wire := range [][]byte{tc.wire, append(slices.Clone(tc.wire), 1, 2, 3, 4, 5, 6, 7, 8)} {
			got, err := AppendDecoded(nil, wire)
			if err != nil || len(got) == 0 || got[0] != tc.id {
				t.Errorf("decode %x: %v %v, want %d first", wire, got, err, tc.id)
			}
		}
	}
}

func TestDecodeEdges(t *testing.T) {
	long := protowire.AppendVarint(nil, 1<<40+5) // 6 bytes, truncated to 32 bits
	ten := protowire.AppendVarint(nil, math.MaxUint64)
	for _, tc := range []struct {
		name string
		wire []byte
		want []uint32
		err  bool
	}{
		{"empty", nil, []uint32{}, false},
		{"six-byte varint keeps its low 32 bits", append(slices.Clone(long), 1, 2, 3, 4, 5, 6, 7, 8), []uint32{5, 1, 2, 3, 4, 5, 6, 7, 8}, false},
		{"ten-byte varint", append(slices.Clone(ten), 9), []uint32{math.MaxUint32, 9}, false},
		{"truncated at the end", []byte{1, 2, 0x80}, nil, true},
		{"truncated in the fast path", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}, nil, true},
		{"eleven bytes", append(bytes.Repeat([]byte{0xff}, 10), 0x01), nil, true},
		{"tenth byte overflows", append(bytes.Repeat([]byte{0xff}, 9), 0x02, 0, 0, 0, 0, 0, 0, 0, 0), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []uint32{42}
			got, err := AppendDecoded(prefix, tc.wire)
			if tc.err {
				if !errors.Is(err, ErrMalformed) || len(got) != 1 || got[0] != 42 {
					t.Fatalf("got %v, %v; want ErrMalformed and the prefix alone", got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, append([]uint32{42}, tc.want...)) {
				t.Fatalf("got %v, %v; want %v after 42", got, err, tc.want)
			}
		})
	}
}

func TestRoundTripMatchesProtobuf(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		ids := make([]uint32, r.IntN(300))
		for i := range ids {
			ids[i] = r.Uint32() >> r.IntN(32)
		}
		wire := AppendEncoded([]byte("prefix"), ids)
		if !bytes.Equal(wire[6:], referenceEncode(ids)) {
			t.Fatalf("encode %v: %x, want %x", ids, wire[6:], referenceEncode(ids))
		}
		field := AppendField(nil, 2, ids)
		var m pb.RouteRequest
		if err := proto.Unmarshal(field, &m); err != nil || !slices.Equal(m.TokenIds, ids) {
			t.Fatalf("protobuf reads %v, %v; want %v", m.TokenIds, err, ids)
		}
		if want, _ := proto.Marshal(&pb.RouteRequest{TokenIds: ids}); !bytes.Equal(field, want) {
			t.Fatalf("field %x, protobuf %x", field, want)
		}
		got, err := AppendDecoded(nil, wire[6:])
		if err != nil || !slices.Equal(got, ids) {
			t.Fatalf("decode: %v, %v; want %v", got, err, ids)
		}
	}
}

// TestDecodeBlockEdges puts a varint the block path does not take (4, 5
// or 10 bytes long, or 11 and malformed) at every position of payloads of
// 1–3-byte ids long enough for several 64-byte blocks, so it falls at
// every offset in a block, on block boundaries and in the tail.
func TestDecodeBlockEdges(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	ids := make([]uint32, 120)
	for i := range ids {
		ids[i] = uint32(r.IntN(1 << (7 * (1 + r.IntN(3)))))
	}
	inserts := map[string][]byte{
		"4 bytes":  protowire.AppendVarint(nil, 1<<21+3),
		"5 bytes":  protowire.AppendVarint(nil, math.MaxUint32),
		"10 bytes": protowire.AppendVarint(nil, math.MaxUint64),
		"11 bytes": append(bytes.Repeat([]byte{0xff}, 10), 0x01),
	}
	for name, odd := range inserts {
		for at := 0; at <= len(ids); at++ {
			wire := AppendEncoded(nil, ids[:at])
			wire = append(wire, odd...)
			wire = AppendEncoded(wire, ids[at:])
			want, werr := referenceDecode(wire)
			got, gerr := AppendDecoded(nil, wire)
			if (werr == nil) != (gerr == nil) || !slices.Equal(got, want) {
				t.Fatalf("%s at id %d: got %v, %v; want %v, %v", name, at, got, gerr, want, werr)
			}
		}
	}
}

func FuzzAppendDecoded(f *testing.F) {
	f.Add([]byte{0xac, 0x02, 0x01})
	// Long enough for the 64-byte block path, lengths mixed, with a
	// 5-byte varint inside a block.
	mixed := AppendEncoded(nil, []uint32{1, 300, 20000, 5, 70000, 128, 16383, 16384, 2, 3})
	mixed = slices.Concat(mixed, mixed, protowire.AppendVarint(nil, math.MaxUint32), mixed, mixed, mixed, mixed)
	f.Add(mixed)
	f.Add(protowire.AppendVarint(nil, math.MaxUint64))
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := referenceDecode(b)
		got, gerr := AppendDecoded(nil, b)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%x: protowire %v, ours %v", b, werr, gerr)
		}
		if werr == nil && !slices.Equal(want, got) {
			t.Fatalf("%x: protowire %v, ours %v", b, want, got)
		}
		if werr == nil && Count(b) != len(want) {
			t.Fatalf("%x: count %d, want %d", b, Count(b), len(want))
		}
	})
}

func FuzzAppendEncoded(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, raw []byte) {
		ids := make([]uint32, len(raw)/4)
		for i := range ids {
			ids[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
		if got, want := AppendEncoded(nil, ids), referenceEncode(ids); !bytes.Equal(got, want) {
			t.Fatalf("%v: %x, want %x", ids, got, want)
		}
	})
}

// The strict decoder refuses an id above 2^32-1 wherever it sits (block
// path or tail) and keeps every id that fits, as AppendDecoded reads it.
func TestAppendDecodedStrict(t *testing.T) {
	ids := make([]uint32, 100)
	for i := range ids {
		ids[i] = uint32(i * 997)
	}
	for _, tc := range []struct {
		name string
		odd  []byte
		err  error
	}{
		{"2^32-1 fits", protowire.AppendVarint(nil, math.MaxUint32), nil},
		{"2^32", protowire.AppendVarint(nil, 1<<32), ErrWide},
		{"ten bytes", protowire.AppendVarint(nil, math.MaxUint64), ErrWide},
		{"malformed", append(bytes.Repeat([]byte{0xff}, 10), 0x01), ErrMalformed},
	} {
		for _, at := range []int{0, 50, 100} {
			wire := slices.Concat(AppendEncoded(nil, ids[:at]), tc.odd, AppendEncoded(nil, ids[at:]))
			got, err := AppendDecodedStrict([]uint32{7}, wire)
			if !errors.Is(err, tc.err) && !(tc.err == nil && err == nil) {
				t.Fatalf("%s at %d: %v, want %v", tc.name, at, err, tc.err)
			}
			if tc.err != nil {
				if len(got) != 1 {
					t.Fatalf("%s at %d: dst grew to %d on error", tc.name, at, len(got))
				}
				continue
			}
			want, _ := AppendDecoded([]uint32{7}, wire)
			if !slices.Equal(got, want) {
				t.Fatalf("%s at %d: %v, want %v", tc.name, at, got, want)
			}
		}
	}
}
