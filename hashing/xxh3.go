package hashing

import (
	"encoding/binary"
	"math/bits"

	"github.com/zeebo/xxh3"
)

// The two hashes of a prompt's every block are XXH3-64 of 16 bytes (a
// sequence hash: parent and local hash) and, at the usual block sizes (5
// to 32 tokens), of 17 to 128 bytes (a block's tokens). xxh3.HashSeed
// reaches those through two calls and a switch over every length class;
// at 512 hashes per 4k-token prompt that dispatch was a measurable share
// of a decision's CPU. xxh3Hash16 and xxh3Hash17to128 are the spec's
// paths for those lengths alone, checked bit for bit against
// xxh3.HashSeed by TestXXH3PathsMatchTheLibrary and FuzzXXH3Paths.

// XXH3's default secret, read as little-endian words at the byte offsets
// its short-input paths use (the spec's kSecret).
const (
	secret000 = 0xbe4ba423396cfeb8
	secret008 = 0x1cad21f72c81017c
	secret016 = 0xdb979083e96dd4de
	secret024 = 0x1f67b3b7a4a44072
	secret032 = 0x78e5c0cc4ee679cb
	secret040 = 0x2172ffcc7dd05a82
	secret048 = 0x8e2443f7744608b8
	secret056 = 0x4c263a81e69035e0
	secret064 = 0xcb00c391bb52283c
	secret072 = 0xa32e531b8b65d088
	secret080 = 0x4ef90da297486471
	secret088 = 0xd8acdea946ef1938
	secret096 = 0x3f349ce33f76faa8
	secret104 = 0x1d4f0bc7c7bbdcf9
	secret112 = 0x3159b4cd4be0518a
	secret120 = 0x647378d9c97e9fc8

	xxhPrime64_1 = 0x9e3779b185ebca87
)

// xxh3Hash16 is XXH3-64 of the 16 bytes le_u64(lo) ‖ le_u64(hi).
func xxh3Hash16(lo, hi, seed uint64) uint64 {
	lo ^= (secret024 ^ secret032) + seed
	hi ^= (secret040 ^ secret048) - seed
	return xxh3Avalanche(16 + bits.ReverseBytes64(lo) + hi + mulFold64(lo, hi))
}

// xxh3Hash17to128 is XXH3-64 of p, 17 ≤ len(p) ≤ 128.
func xxh3Hash17to128(p []byte, seed uint64) uint64 {
	n := len(p)
	word := func(at int) uint64 { return binary.LittleEndian.Uint64(p[at:]) }
	acc := uint64(n) * xxhPrime64_1
	if n > 32 {
		if n > 64 {
			if n > 96 {
				acc += mulFold64(word(48)^(secret096+seed), word(56)^(secret104-seed))
				acc += mulFold64(word(n-64)^(secret112+seed), word(n-56)^(secret120-seed))
			}
			acc += mulFold64(word(32)^(secret064+seed), word(40)^(secret072-seed))
			acc += mulFold64(word(n-48)^(secret080+seed), word(n-40)^(secret088-seed))
		}
		acc += mulFold64(word(16)^(secret032+seed), word(24)^(secret040-seed))
		acc += mulFold64(word(n-32)^(secret048+seed), word(n-24)^(secret056-seed))
	}
	acc += mulFold64(word(0)^(secret000+seed), word(8)^(secret008-seed))
	acc += mulFold64(word(n-16)^(secret016+seed), word(n-8)^(secret024-seed))
	return xxh3Avalanche(acc)
}

// xxh3Seeded is XXH3-64 of p with seed, through the short paths above
// where they apply.
func xxh3Seeded(p []byte, seed uint64) uint64 {
	if n := len(p); n > 16 && n <= 128 {
		return xxh3Hash17to128(p, seed)
	}
	return xxh3.HashSeed(p, seed)
}

func mulFold64(x, y uint64) uint64 {
	hi, lo := bits.Mul64(x, y)
	return hi ^ lo
}

func xxh3Avalanche(x uint64) uint64 {
	x ^= x >> 37
	x *= 0x165667919e3779f9
	return x ^ x>>32
}
