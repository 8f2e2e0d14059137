package zmqevents

import (
	"encoding/binary"
	"math"
)

// reader is a bounds-checked msgpack cursor over one payload. It decodes
// only what the event format needs and never allocates on the input's
// say-so: a declared length is trusted only after the bytes are there.
type reader struct {
	buf []byte
	pos int
}

// maxDepth bounds nesting when skipping unknown values, so a hostile
// payload of nested arrays cannot recurse without limit.
const maxDepth = 32

// msgpack type families returned by peekKind.
type kind uint8

const (
	kindNil kind = iota + 1
	kindBool
	kindInt // positive or negative integer
	kindFloat
	kindStr
	kindBin
	kindArray
	kindMap
	kindExt
)

func (r *reader) remaining() int { return len(r.buf) - r.pos }

func (r *reader) peekKind() (kind, error) {
	if r.pos >= len(r.buf) {
		return 0, malformed("truncated at byte %d", r.pos)
	}
	c := r.buf[r.pos]
	switch {
	case c <= 0x7f || c >= 0xe0:
		return kindInt, nil
	case c <= 0x8f:
		return kindMap, nil
	case c <= 0x9f:
		return kindArray, nil
	case c <= 0xbf:
		return kindStr, nil
	}
	switch c {
	case 0xc0:
		return kindNil, nil
	case 0xc2, 0xc3:
		return kindBool, nil
	case 0xc4, 0xc5, 0xc6:
		return kindBin, nil
	case 0xca, 0xcb:
		return kindFloat, nil
	case 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3:
		return kindInt, nil
	case 0xd9, 0xda, 0xdb:
		return kindStr, nil
	case 0xdc, 0xdd:
		return kindArray, nil
	case 0xde, 0xdf:
		return kindMap, nil
	case 0xc7, 0xc8, 0xc9, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return kindExt, nil
	}
	return 0, malformed("invalid msgpack code 0x%02x at byte %d", c, r.pos)
}

func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || n > r.remaining() {
		return nil, malformed("truncated: need %d bytes at byte %d, have %d", n, r.pos, r.remaining())
	}
	b := r.buf[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

func (r *reader) byte1() (byte, error) {
	b, err := r.take(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

// length reads a big-endian unsigned length of width bytes.
func (r *reader) length(width int) (int, error) {
	b, err := r.take(width)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, x := range b {
		n = n<<8 | uint64(x)
	}
	if n > math.MaxInt32 {
		return 0, malformed("length %d too large", n)
	}
	return int(n), nil
}

// tryNil consumes a nil and reports whether there was one.
func (r *reader) tryNil() bool {
	if r.pos < len(r.buf) && r.buf[r.pos] == 0xc0 {
		r.pos++
		return true
	}
	return false
}

// containerLen reads an array or map header. The length is checked
// against the bytes left (each element takes at least one byte) so callers
// may size buffers by it.
func (r *reader) containerLen(want kind) (int, error) {
	at := r.pos
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	var n int
	switch {
	case want == kindArray && c >= 0x90 && c <= 0x9f:
		n = int(c & 0x0f)
	case want == kindMap && c >= 0x80 && c <= 0x8f:
		n = int(c & 0x0f)
	case want == kindArray && c == 0xdc, want == kindMap && c == 0xde:
		n, err = r.length(2)
	case want == kindArray && c == 0xdd, want == kindMap && c == 0xdf:
		n, err = r.length(4)
	default:
		return 0, malformed("byte %d: code 0x%02x is not a %s", at, c, kindName(want))
	}
	if err != nil {
		return 0, err
	}
	minBytes := n
	if want == kindMap {
		minBytes = 2 * n
	}
	if minBytes > r.remaining() {
		return 0, malformed("byte %d: %s of %d entries exceeds the payload", at, kindName(want), n)
	}
	return n, nil
}

func kindName(k kind) string {
	switch k {
	case kindArray:
		return "array"
	case kindMap:
		return "map"
	case kindStr:
		return "string"
	case kindBin:
		return "bin"
	case kindInt:
		return "integer"
	}
	return "value"
}

// rawBytes reads a str or bin body without copying.
func (r *reader) rawBytes() ([]byte, error) {
	at := r.pos
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = int(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		n, err = r.length(1)
	case c == 0xda || c == 0xc5:
		n, err = r.length(2)
	case c == 0xdb || c == 0xc6:
		n, err = r.length(4)
	default:
		return nil, malformed("byte %d: code 0x%02x is not a string or bin", at, c)
	}
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

// integer reads any msgpack integer as its 64-bit two's-complement bits
// and says whether it was negative.
func (r *reader) integer() (bits uint64, negative bool, err error) {
	at := r.pos
	c, err := r.byte1()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		return uint64(c), false, nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), true, nil
	}
	if c < 0xcc || c > 0xd3 {
		return 0, false, malformed("byte %d: code 0x%02x is not an integer", at, c)
	}
	width := 1 << ((c - 0xcc) & 3) // cc..cf unsigned, d0..d3 signed: 1, 2, 4, 8 bytes
	b, err := r.take(width)
	if err != nil {
		return 0, false, err
	}
	var u uint64
	for _, x := range b {
		u = u<<8 | uint64(x)
	}
	if c >= 0xd0 { // signed: sign-extend from width bytes
		shift := uint(64 - 8*width)
		v := int64(u<<shift) >> shift
		return uint64(v), v < 0, nil
	}
	return u, false, nil
}

// float reads a float32, float64 or integer as a float64 (timestamps).
func (r *reader) float() (float64, error) {
	k, err := r.peekKind()
	if err != nil {
		return 0, err
	}
	if k == kindInt {
		bits, neg, err := r.integer()
		if neg {
			return float64(int64(bits)), err
		}
		return float64(bits), err
	}
	at := r.pos
	c, _ := r.byte1() // peekKind above read this byte
	switch c {
	case 0xca:
		b, err := r.take(4)
		if err != nil {
			return 0, err
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(b))), nil
	case 0xcb:
		b, err := r.take(8)
		if err != nil {
			return 0, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
	}
	return 0, malformed("byte %d: code 0x%02x is not a number", at, c)
}

// skip steps over one value of any type.
func (r *reader) skip(depth int) error {
	if depth > maxDepth {
		return malformed("byte %d: nesting deeper than %d", r.pos, maxDepth)
	}
	k, err := r.peekKind()
	if err != nil {
		return err
	}
	switch k {
	case kindNil, kindBool:
		r.pos++
		return nil
	case kindInt:
		_, _, err = r.integer()
		return err
	case kindFloat:
		_, err = r.float()
		return err
	case kindStr, kindBin:
		_, err = r.rawBytes()
		return err
	case kindArray, kindMap:
		n, err := r.containerLen(k)
		if err != nil {
			return err
		}
		if k == kindMap {
			n *= 2
		}
		for range n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	return r.skipExt()
}

func (r *reader) skipExt() error {
	at := r.pos
	c, err := r.byte1()
	if err != nil {
		return err
	}
	var n int
	switch c {
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		n = 1 << (c - 0xd4)
	case 0xc7:
		n, err = r.length(1)
	case 0xc8:
		n, err = r.length(2)
	case 0xc9:
		n, err = r.length(4)
	default:
		return malformed("byte %d: code 0x%02x is not an ext", at, c)
	}
	if err != nil {
		return err
	}
	_, err = r.take(n + 1) // type byte, then data
	return err
}
