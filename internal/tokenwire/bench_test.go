package tokenwire

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/testutil"
)

// prompts are 64 distinct 4k-token prompts for each of three id
// distributions (testutil.TokenPrompts): the route benchmarks' 3-byte
// varints, kvbench's 2- and 3-byte varints in random order, and a Zipf
// law's mostly 1-2-byte ones, mixed. The old decoder took 9 us on one
// uniform prompt decoded over and over and 17 us on distinct ones.
func prompts() map[string][][]uint32 { return testutil.TokenPrompts(4096, 64) }

// BenchmarkDecode4k reports this package's decoder, the one it replaced
// (a branch per id on its length) and protowire's per-varint loop on the
// same payloads, side by side.
func BenchmarkDecode4k(b *testing.B) {
	decoders := []struct {
		name   string
		decode func([]uint32, []byte) ([]uint32, error)
	}{
		{"tokenwire", AppendDecoded},
		{"branchy", appendBranchy},
		{"protowire", appendReference},
	}
	for name, set := range prompts() {
		var wires [][]byte
		size := 0
		for _, ids := range set {
			wires = append(wires, AppendEncoded(nil, ids))
			size += len(wires[len(wires)-1])
		}
		buf := make([]uint32, 0, len(set[0]))
		for _, d := range decoders {
			b.Run(name+"/"+d.name, func(b *testing.B) {
				b.SetBytes(int64(size / len(wires)))
				k := 0
				for b.Loop() {
					buf, _ = d.decode(buf[:0], wires[k%len(wires)])
					k++
				}
			})
		}
	}
}

// BenchmarkEncode4k is the encoder against protowire's per-varint append.
func BenchmarkEncode4k(b *testing.B) {
	for name, set := range prompts() {
		buf := make([]byte, 0, 5*len(set[0])+8)
		size := 0
		for _, ids := range set {
			size += Size(ids)
		}
		b.Run(name+"/tokenwire", func(b *testing.B) {
			b.SetBytes(int64(size / len(set)))
			k := 0
			for b.Loop() {
				buf = AppendEncoded(buf[:0], set[k%len(set)])
				k++
			}
		})
		b.Run(name+"/protowire", func(b *testing.B) {
			b.SetBytes(int64(size / len(set)))
			k := 0
			for b.Loop() {
				buf = buf[:0]
				for _, v := range set[k%len(set)] {
					buf = protowireAppend(buf, v)
				}
				k++
			}
		})
	}
}
