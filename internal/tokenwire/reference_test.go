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
