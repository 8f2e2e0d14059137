// Package tokenwire encodes and decodes a prompt's token ids as the
// payload of a packed `repeated uint32` protobuf field: the bulk of every
// gRPC route call. protobuf-go's generic packed code makes a varint call
// per id (and its encoder a size pass of calls first), which was about a
// quarter of a gRPC decision's CPU, client and router, on 4k-token
// prompts. Token ids take 1–3 bytes, so here neither direction has a
// branch on an id's length (decodetable.go says why that matters): the
// decoder takes 64 bytes at a time, the encoder writes each id as 4
// bytes, and the count of ids is read 8 bytes at a time.
//
// AppendDecoded's semantics are protobuf's: a varint of up to 10 bytes is
// accepted and truncated to its low 32 bits, as protobuf-go does for
// uint32 fields; AppendDecodedStrict refuses such an id instead.
// The tests and fuzz targets check both directions against protowire and
// protobuf-go.
package tokenwire

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrMalformed is a payload that does not split into varints: one is
// truncated or longer than 10 bytes.
var ErrMalformed = errors.New("token_ids: malformed varint")

const (
	continuation = 0x8080808080808080 // each byte's continuation bit, 8 bytes at a time
	lane         = 0x7f               // a byte's 7 value bits
)

// Count is the number of varints in a well-formed payload: the number of
// bytes without a continuation bit.
func Count(b []byte) int {
	n := 0
	for len(b) >= 8 {
		n += bits.OnesCount64(^binary.LittleEndian.Uint64(b) & continuation)
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x80 {
			n++
		}
	}
	return n
}

// ErrWide is a token id above 2^32-1, which AppendDecodedStrict refuses
// (protobuf would keep its low 32 bits: a different token).
var ErrWide = errors.New("token_ids: a token id does not fit in uint32")

// AppendDecoded appends the ids in payload b to dst. dst grows at most
// once. On error dst is returned unchanged in length.
func AppendDecoded(dst []uint32, b []byte) ([]uint32, error) {
	return appendDecoded(dst, b, false)
}

// AppendDecodedStrict is AppendDecoded that refuses (ErrWide) an id above
// 2^32-1 instead of truncating it, as the JSON API refuses one. The check
// costs nothing on ids of 1–3 bytes: only the per-varint path sees longer
// ones.
func AppendDecodedStrict(dst []uint32, b []byte) ([]uint32, error) {
	return appendDecoded(dst, b, true)
}

func appendDecoded(dst []uint32, b []byte, strict bool) ([]uint32, error) {
	n := Count(b)
	dst = slices.Grow(dst, n)
	out := dst[len(dst) : len(dst)+n]
	// Token ids take 1–3 bytes (vocabularies stay below 2^21 ids): 64-byte
	// blocks of them go through decodeBlocks (decodetable.go). What it
	// leaves, a longer varint or the last few bytes, goes through
	// protowire one varint at a time, and decodeBlocks takes over again
	// after each.
	i, j := decodeBlocks(out, b)
	for i < len(b) {
		v, k := protowire.ConsumeVarint(b[i:])
		if k < 0 || j == len(out) {
			return dst, ErrMalformed
		}
		if strict && v > math.MaxUint32 {
			return dst, ErrWide
		}
		out[j] = uint32(v)
		i += k
		j++
		di, dj := decodeBlocks(out[j:], b[i:])
		i += di
		j += dj
	}
	return dst[:len(dst)+n], nil
}

// Size is the encoded size of ids.
func Size(ids []uint32) int {
	n := 0
	for _, v := range ids {
		n += int(varintSize[bits.Len32(v)])
	}
	return n
}

// varintSize is a varint's length by its value's bit length: one byte per
// started 7 bits, one for zero.
var varintSize = [33]uint8{
	1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5}

// AppendEncoded appends ids as a packed payload (without the field's tag
// and length).
func AppendEncoded(dst []byte, ids []uint32) []byte {
	return appendEncoded(dst, ids, Size(ids))
}

func appendEncoded(dst []byte, ids []uint32, size int) []byte {
	dst = slices.Grow(dst, size)
	out := dst[len(dst) : len(dst)+size]
	// What encodeShort leaves, a longer id or the last few, is written one
	// id at a time, and encodeShort takes over again after each.
	p, i := encodeShort(out, ids)
	for i < len(ids) {
		switch v := ids[i]; {
		case v < 1<<7 && p < len(out):
			out[p] = byte(v)
			p++
		case v < 1<<14 && p+1 < len(out):
			out[p] = byte(v) | 0x80
			out[p+1] = byte(v >> 7)
			p += 2
		case v < 1<<21 && p+2 < len(out):
			out[p] = byte(v) | 0x80
			out[p+1] = byte(v>>7) | 0x80
			out[p+2] = byte(v >> 14)
			p += 3
		default:
			p += len(protowire.AppendVarint(out[p:p], uint64(v)))
		}
		i++
		dp, di := encodeShort(out[p:], ids[i:])
		p += dp
		i += di
	}
	return dst[:len(dst)+size]
}

// encodeShort writes ids of 1–3 bytes 4 bytes at a time, with no branch
// on their length (as in decodetable.go: it mispredicts on real
// prompts): the bytes past an id are zeros the next ids overwrite. It
// stops 4 bytes short of out's end, or at a longer id, and returns how
// far it got in each. It is a function of its own so that its loop has
// the registers to itself.
func encodeShort(out []byte, ids []uint32) (p, i int) {
	for ; i < len(ids) && p+4 <= len(out); i++ {
		v := ids[i]
		if v >= 1<<21 {
			break
		}
		n := varintSize[bits.Len32(v)]
		w := v&lane | v<<1&(lane<<8) | v<<2&(lane<<16) | continuations[n&3]
		binary.LittleEndian.PutUint32(out[p:p+4], w)
		p += int(n)
	}
	return p, i
}

// continuations are the continuation bits of a varint of n bytes (1–3),
// indexed by n.
var continuations = [4]uint32{0, 0, 0x80, 0x8080}

// AppendField appends ids as field num of a message: tag, length and
// packed payload; nothing when ids is empty, as protobuf encodes an
// empty repeated field.
func AppendField(dst []byte, num protowire.Number, ids []uint32) []byte {
	if len(ids) == 0 {
		return dst
	}
	return AppendFieldSized(dst, num, ids, Size(ids))
}

// AppendFieldSized is AppendField for a caller that already has
// size = Size(ids) (to size its buffer).
func AppendFieldSized(dst []byte, num protowire.Number, ids []uint32, size int) []byte {
	if len(ids) == 0 {
		return dst
	}
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(size))
	return appendEncoded(dst, ids, size)
}

// FieldSize is the size AppendField appends for a payload of size bytes
// (Size of the ids; 0 for none).
func FieldSize(num protowire.Number, size int) int {
	if size == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(size)
}
