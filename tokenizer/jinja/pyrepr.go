package jinja

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Python's str() and repr() of template values: the engines render with
// Python's Jinja2, where {{ x }}, x|string and ~ call str(), and str() of
// a list or dict is its repr ({'a': None, 'b': True}).

// pyFloatRepr is Python's float.__repr__: the shortest digits that read
// back, positional from 1e-4 to 1e16, else scientific with a two-digit
// exponent; an integral value keeps ".0".
func pyFloatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64) // 1e+16, 1.5e-05: Python's form
		return s
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// pyRepr is Python's repr() of a template value.
//
// It writes at most about maxValue bytes and maxDepth levels: past them
// the text is cut, and a list that holds itself is written as [...], as
// Python does. A cut text is longer than maxValue, so whatever builds a
// value from it fails the size check.
func pyRepr(v any) string {
	var b strings.Builder
	writeRepr(&b, v, 0)
	return b.String()
}

func writeRepr(b *strings.Builder, v any, depth int) {
	if int64(b.Len()) > maxValue {
		return
	}
	if depth > maxDepth {
		b.WriteString("...")
		return
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("None")
	case Undefined:
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		b.WriteString(pyFloatRepr(v))
	case string:
		writeStrRepr(b, v)
	case *List:
		b.WriteByte('[')
		for i, x := range v.Items {
			if int64(b.Len()) > maxValue {
				return
			}
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, x, depth+1)
		}
		b.WriteByte(']')
	case *Dict:
		b.WriteByte('{')
		for i, k := range v.keys {
			if int64(b.Len()) > maxValue {
				return
			}
			if i > 0 {
				b.WriteString(", ")
			}
			writeStrRepr(b, k)
			b.WriteString(": ")
			writeRepr(b, v.m[k], depth+1)
		}
		b.WriteByte('}')
	default:
		b.WriteString(toString(v))
	}
}

// writeStrRepr is Python's str.__repr__: single quotes unless the text
// holds a single quote and no double quote; backslash escapes for the
// quote, backslash, \t \n \r and characters that are not printable.
func writeStrRepr(b *strings.Builder, s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(quote)
}
