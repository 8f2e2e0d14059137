package hashing

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"
)

// The short paths agree with the library at every length they take (and
// xxh3Seeded at the lengths around them), for the base seed, a LoRA's
// salted seed and random seeds.
func TestXXH3PathsMatchTheLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seeds := []uint64{0, Seed, SaltedSeed("adapter-a"), ^uint64(0), rng.Uint64(), rng.Uint64()}
	buf := make([]byte, 160)
	for round := range 50 {
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		for _, seed := range seeds {
			for n := 0; n <= len(buf); n++ {
				if got, want := xxh3Seeded(buf[:n], seed), xxh3.HashSeed(buf[:n], seed); got != want {
					t.Fatalf("round %d: %d bytes, seed %#x: %#x, the library says %#x", round, n, seed, got, want)
				}
			}
			lo, hi := binary.LittleEndian.Uint64(buf), binary.LittleEndian.Uint64(buf[8:])
			if got, want := xxh3Hash16(lo, hi, seed), xxh3.HashSeed(buf[:16], seed); got != want {
				t.Fatalf("round %d: 16 bytes, seed %#x: %#x, the library says %#x", round, seed, got, want)
			}
		}
	}
}

func FuzzXXH3Paths(f *testing.F) {
	f.Add([]byte("0123456789abcdef0"), uint64(Seed))
	f.Add(make([]byte, 128), uint64(0))
	f.Add(make([]byte, 64), ^uint64(0))
	f.Fuzz(func(t *testing.T, p []byte, seed uint64) {
		if got, want := xxh3Seeded(p, seed), xxh3.HashSeed(p, seed); got != want {
			t.Fatalf("%d bytes, seed %#x: %#x, the library says %#x", len(p), seed, got, want)
		}
		if len(p) >= 16 {
			lo, hi := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])
			if got, want := xxh3Hash16(lo, hi, seed), xxh3.HashSeed(p[:16], seed); got != want {
				t.Fatalf("16 bytes, seed %#x: %#x, the library says %#x", seed, got, want)
			}
		}
	})
}
