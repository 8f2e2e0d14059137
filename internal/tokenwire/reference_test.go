package tokenwire

import "google.golang.org/protobuf/encoding/protowire"

// appendReference is the per-varint loop the decoder replaced.
func appendReference(dst []uint32, b []byte) ([]uint32, error) {
	for i := 0; i < len(b); {
		v, k := protowire.ConsumeVarint(b[i:])
		if k < 0 {
			return dst, ErrMalformed
		}
		dst = append(dst, uint32(v))
		i += k
	}
	return dst, nil
}

func protowireAppend(dst []byte, v uint32) []byte { return protowire.AppendVarint(dst, uint64(v)) }

// appendBranchy is the decoder tokenwire had before decodeBlocks: an
// inline branch per id on its length, 1 to 3 bytes.
func appendBranchy(dst []uint32, b []byte) ([]uint32, error) {
	i := 0
	for i+2 < len(b) {
		c0 := b[i]
		if c0 < 0x80 {
			dst = append(dst, uint32(c0))
			i++
			continue
		}
		c1 := b[i+1]
		if c1 < 0x80 {
			dst = append(dst, uint32(c0&lane)|uint32(c1)<<7)
			i += 2
			continue
		}
		c2 := b[i+2]
		if c2 < 0x80 {
			dst = append(dst, uint32(c0&lane)|uint32(c1&lane)<<7|uint32(c2)<<14)
			i += 3
			continue
		}
		break
	}
	return appendReference(dst, b[i:])
}
