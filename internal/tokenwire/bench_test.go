package tokenwire

import (
	"math/rand/v2"
	"testing"
)

// prompts are 4k-token prompts with two id distributions: the route
// benchmarks' (ids from 100,000 up: 3-byte varints) and a Zipf law over
// Qwen's 151,936-id vocabulary (frequent words have small ids: mostly
// 1–2-byte varints, a few 3-byte ones, mixed).
func prompts() map[string][]uint32 {
	bench := make([]uint32, 4096)
	for i := range bench {
		bench[i] = 100000 + uint32(i)
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, 151935)
	zipf := make([]uint32, 4096)
	for i := range zipf {
		zipf[i] = uint32(z.Uint64())
	}
	return map[string][]uint32{"bench": bench, "zipf": zipf}
}

// BenchmarkDecode4k reports this package's decoder and protowire's
// per-varint loop on the same payloads, side by side.
func BenchmarkDecode4k(b *testing.B) {
	for name, ids := range prompts() {
		wire := AppendEncoded(nil, ids)
		buf := make([]uint32, 0, len(ids))
		b.Run(name+"/tokenwire", func(b *testing.B) {
			b.SetBytes(int64(len(wire)))
			for b.Loop() {
				buf, _ = AppendDecoded(buf[:0], wire)
			}
		})
		b.Run(name+"/protowire", func(b *testing.B) {
			b.SetBytes(int64(len(wire)))
			for b.Loop() {
				buf, _ = appendReference(buf[:0], wire)
			}
		})
	}
}

// BenchmarkEncode4k is the encoder against protowire's per-varint append.
func BenchmarkEncode4k(b *testing.B) {
	for name, ids := range prompts() {
		buf := make([]byte, 0, 5*len(ids)+8)
		b.Run(name+"/tokenwire", func(b *testing.B) {
			b.SetBytes(int64(Size(ids)))
			for b.Loop() {
				buf = AppendEncoded(buf[:0], ids)
			}
		})
		b.Run(name+"/protowire", func(b *testing.B) {
			b.SetBytes(int64(Size(ids)))
			for b.Loop() {
				buf = buf[:0]
				for _, v := range ids {
					buf = protowireAppend(buf, v)
				}
			}
		})
	}
}
