package hashing

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/kv"
)

// The xxh3 reference vectors (xxhash's own sanity table) pin the library:
// if it ever stopped being XXH3_64bits_withSeed, our hashes would silently
// stop matching Dynamo publishers.
func TestXXH3ReferenceVectors(t *testing.T) {
	if got := xxh3.HashSeed(nil, 0); got != 0x2D06800538D394C2 {
		t.Fatalf("xxh3(empty, 0) = %#x", got)
	}
}

func seq(n int, start uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = start + uint32(i)
	}
	return out
}

// TestBlockHashes re-derives the expected values with the same recipe as the
// code, so it checks structure (which blocks, which seed), not compatibility;
// the independent Dynamo vectors are in dynamo_vectors_test.go.
func TestBlockHashes(t *testing.T) {
	tokens := seq(40, 0)
	manual := func(block []uint32, seed uint64) kv.LocalBlockHash {
		var buf []byte
		for _, tok := range block {
			buf = binary.LittleEndian.AppendUint32(buf, tok)
		}
		return kv.LocalBlockHash(xxh3.HashSeed(buf, seed))
	}
	tests := []struct {
		name      string
		tokens    []uint32
		blockSize int
		opts      Options
		want      []kv.LocalBlockHash
	}{
		{"empty", nil, 16, Options{}, nil},
		{"partial only", tokens[:15], 16, Options{}, nil},
		{"two full blocks, partial ignored", tokens, 16, Options{},
			[]kv.LocalBlockHash{manual(tokens[:16], 1337), manual(tokens[16:32], 1337)}},
		{"lora salts the seed", tokens[:16], 16, Options{LoraName: "adapter-a"},
			[]kv.LocalBlockHash{manual(tokens[:16], 1337+xxh3.HashString("adapter-a"))}},
		{"zero block size", tokens, 0, Options{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BlockHashes(tt.tokens, tt.blockSize, tt.opts)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d hashes, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("block %d: got %#x want %#x", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// Fixed vectors: a change to any of these breaks compatibility with every
// publisher that hashes the same way, so it must be deliberate.
func TestBlockHashFixedVectors(t *testing.T) {
	got := BlockHashes(seq(32, 1), 16, Options{})
	want := []kv.LocalBlockHash{fixedBlock0, fixedBlock1}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("block %d = %#x, want %#x", i, uint64(got[i]), uint64(want[i]))
		}
	}
	if s := SequenceHashes(got); s[0] != kv.SequenceHash(fixedBlock0) || s[1] != fixedSeq1 {
		t.Errorf("sequence hashes = %#x %#x", uint64(s[0]), uint64(s[1]))
	}
}

func TestExtraKeysChangeOnlyTheirBlock(t *testing.T) {
	tokens := seq(32, 7)
	plain := BlockHashes(tokens, 16, Options{})
	mm := BlockHashes(tokens, 16, Options{ExtraKeys: [][]uint64{nil, {9, 3}}})
	if plain[0] != mm[0] {
		t.Error("block 0 has no extra keys; its hash must not change")
	}
	if plain[1] == mm[1] {
		t.Error("block 1 has extra keys; its hash must change")
	}
	sorted := BlockHashes(tokens, 16, Options{ExtraKeys: [][]uint64{nil, {3, 9}}})
	if sorted[1] != mm[1] {
		t.Error("extra keys are sorted before hashing: order must not matter")
	}
}

func TestSequenceHashesIdentifyPrefixes(t *testing.T) {
	a := BlockHashes(seq(48, 0), 16, Options{})
	b := append([]kv.LocalBlockHash{}, a...)
	b[1] ^= 1 // differ in the middle block
	sa, sb := SequenceHashes(a), SequenceHashes(b)
	if sa[0] != sb[0] {
		t.Error("equal first blocks must give equal first sequence hash")
	}
	if sa[1] == sb[1] || sa[2] == sb[2] {
		t.Error("a differing block must change its and every later sequence hash")
	}
	if SequenceHashes(nil) != nil {
		t.Error("no blocks, no sequence hashes")
	}
}

func BenchmarkBlockHashes(b *testing.B) {
	tokens := seq(8192, 0)
	var dst []kv.LocalBlockHash
	b.SetBytes(int64(len(tokens) * 4))
	for b.Loop() {
		dst = AppendBlockHashes(dst[:0], tokens, 16, Options{})
	}
}

func BenchmarkSequenceHashes(b *testing.B) {
	local := BlockHashes(seq(8192, 0), 16, Options{})
	var dst []kv.SequenceHash
	b.SetBytes(int64(len(local) * 8))
	for b.Loop() {
		dst = AppendSequenceHashes(dst[:0], local)
	}
}

// TestInPlaceHashMatchesEncodedCopy checks the little-endian fast path (the
// token memory hashed in place) against the portable one (each token
// encoded into a buffer), with and without per-block extra keys.
func TestInPlaceHashMatchesEncodedCopy(t *testing.T) {
	if !littleEndian {
		t.Skip("big-endian machine: only the portable path runs")
	}
	tokens := seq(16*9+5, 7)
	cases := map[string]Options{
		"plain":      {},
		"lora":       {LoraName: "adapter"},
		"some extra": {ExtraKeys: [][]uint64{nil, {9, 3}, {}, {1}}},
	}
	for name, opts := range cases {
		fast := BlockHashes(tokens, 16, opts)
		littleEndian = false
		slow := BlockHashes(tokens, 16, opts)
		littleEndian = true
		if !slices.Equal(fast, slow) || len(fast) != 9 {
			t.Errorf("%s: in place %v, encoded %v", name, fast, slow)
		}
	}
}
