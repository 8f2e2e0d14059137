package tokenwire

import (
	"encoding/binary"
	"math/bits"
)

// The decoder's fast path finds where the varints of 64 bytes end first,
// then decodes each id from its own 8-byte load, without a branch on any
// id's length and without a chain of dependent loads.
//
// Why: a branch per id on its length is predictable only when lengths
// repeat. Real prompts and kvbench's mix 1-, 2- and 3-byte ids in no
// order (kvbench's ids are uniform over 50,000: two thirds take 3 bytes,
// a third 2), so such a branch mispredicts about every other id: 17 µs per
// 4k such ids, decoding distinct prompts, against 9 µs when the benchmark
// decoded one prompt over and over and the predictor learnt its pattern
// (BenchmarkDecode4k/*/distinct). Deciding each id's position from the
// one before it (a load, then its length, then the next load) is no
// better: a chain of ~18 cycles per 8 bytes.
//
// How: a 64-bit mask has a bit per byte that ends a varint (high bit
// clear), built from eight independent loads. Each set bit is one id: it
// starts one byte after the previous bit and ends at this one; clearing
// the lowest bit is the only step that depends on the id before. The id
// is read with its own load and extracted by shifts and masks.

// blockBytes is how many bytes one mask covers.
const blockBytes = 64

// terminators is the mask of w's bytes that end a varint: bit k is set
// when byte k's continuation bit is clear. The multiply moves byte k's
// bit (at 8k after the shift) to bit 56+k; no two partial products land
// on the same bit, so nothing carries into the top byte.
func terminators(w uint64) uint64 {
	return ((^w & continuation) >> 7) * 0x0102040810204080 >> 56
}

// extract packs the 7 value bits of x's low 3 bytes; masked by
// valueMask[n], it is the varint of length n (1–3) at x's low end.
func extract(x uint64) uint32 {
	return uint32(x&lane | x>>1&(lane<<7) | x>>2&(lane<<14))
}

var valueMask = [4]uint32{0, 1<<7 - 1, 1<<14 - 1, 1<<21 - 1}

// decodeBlocks decodes ids from b into out, a block of 64 bytes at a
// time, while a whole block and the 8 bytes after it remain in b (each id
// is read with an 8-byte load) and out has room for a block's ids. It
// returns how far it got in each, stopping early, for the caller's
// general loop, at a varint longer than 3 bytes or a block in which no
// varint ends.
func decodeBlocks(out []uint32, b []byte) (i, j int) {
	for i+blockBytes+8 <= len(b) && j+blockBytes <= len(out) {
		blk := (*[blockBytes + 8]byte)(b[i:])
		var m uint64
		for k := 0; k < blockBytes; k += 8 {
			m |= terminators(binary.LittleEndian.Uint64(blk[k:])) << k
		}
		used, ids, whole := decodeBlock((*[blockBytes]uint32)(out[j:]), blk, m)
		i += used
		j += ids
		if !whole || used == 0 {
			break
		}
	}
	return i, j
}

// decodeBlock decodes the ids whose last bytes are m's set bits into o,
// and returns the bytes and ids it took. whole is false if it stopped at
// a varint longer than 3 bytes. It is a function of its own so that its
// loop has the registers to itself; its indexes are masked to the
// arrays' sizes, which they are within anyway, so that the compiler drops
// the bounds checks.
func decodeBlock(o *[blockBytes]uint32, blk *[blockBytes + 8]byte, m uint64) (used, ids int, whole bool) {
	for m != 0 {
		end := bits.TrailingZeros64(m)
		m &= m - 1
		n := end - used + 1
		if n > 3 {
			return used, ids, false
		}
		s := used & (blockBytes - 1)
		o[ids&(blockBytes-1)] = extract(binary.LittleEndian.Uint64(blk[s:s+8])) & valueMask[n&3]
		ids++
		used = end + 1
	}
	return used, ids, true
}
