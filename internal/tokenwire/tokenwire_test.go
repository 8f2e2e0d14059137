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

func FuzzAppendDecoded(f *testing.F) {
	f.Add([]byte{0xac, 0x02, 0x01})
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
