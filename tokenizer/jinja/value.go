package jinja

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Values are Go values: nil (none), Undefined, bool, int64, float64,
// string, *List, *Dict (ordered; namespaces too) and Func.

// Undefined is a name or key that does not exist.
type Undefined struct{}

// List is a list (or tuple).
type List struct{ Items []any }

// Dict is a dict with string keys that keeps insertion order.
type Dict struct {
	keys      []string
	m         map[string]any
	namespace bool
}

// Func is a callable: a global function, a macro, a bound method.
type Func func(args []any, kwargs *Dict) (any, error)

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{m: map[string]any{}} }

// Set sets a key (appended if new).
func (d *Dict) Set(k string, v any) {
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

// Get returns a key's value.
func (d *Dict) Get(k string) (any, bool) {
	v, ok := d.m[k]
	return v, ok
}

// Keys returns the keys in order.
func (d *Dict) Keys() []string { return d.keys }

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

func (d *Dict) delete(k string) {
	if _, ok := d.m[k]; !ok {
		return
	}
	delete(d.m, k)
	for i, x := range d.keys {
		if x == k {
			d.keys = append(d.keys[:i:i], d.keys[i+1:]...)
			break
		}
	}
}

// FromGo converts Go values (maps, slices, numbers) to template values;
// map keys are sorted (Go maps have no order).
func FromGo(v any) any {
	switch v := v.(type) {
	case nil, bool, string, int64, float64, *List, *Dict, Func, Undefined:
		return v
	case int:
		return int64(v)
	case int32:
		return int64(v)
	case uint32:
		return int64(v)
	case uint64:
		return int64(v)
	case float32:
		return float64(v)
	case []any:
		l := &List{Items: make([]any, len(v))}
		for i, x := range v {
			l.Items[i] = FromGo(x)
		}
		return l
	case []string:
		l := &List{Items: make([]any, len(v))}
		for i, x := range v {
			l.Items[i] = x
		}
		return l
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := NewDict()
		for _, k := range keys {
			d.Set(k, FromGo(v[k]))
		}
		return d
	case json.RawMessage:
		x, err := FromJSON(v)
		if err != nil {
			return Undefined{}
		}
		return x
	case func(args []any, kwargs *Dict) (any, error):
		return Func(v)
	}
	return fmt.Sprint(v)
}

// truthy is Python's truth value.
func truthy(v any) bool {
	switch v := v.(type) {
	case nil, Undefined:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case *List:
		return len(v.Items) > 0
	case *Dict:
		return v.namespace || len(v.keys) > 0
	}
	return true
}

// toString is Python's str() of a value, as Jinja2 renders it into the
// output (None, True, a list's repr); undefined renders nothing.
func toString(v any) string {
	switch v := v.(type) {
	case Undefined:
		return ""
	case nil:
		return "None"
	case string:
		return v
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return pyFloatRepr(v)
	case *List, *Dict:
		return pyRepr(v)
	case Func:
		return "<function>"
	}
	return fmt.Sprint(v)
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "none"
	case Undefined:
		return "undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "string"
	case *List:
		return "list"
	case *Dict:
		return "dict"
	case Func:
		return "function"
	}
	return fmt.Sprintf("%T", v)
}

type jsonOpts struct {
	indent      int
	ensureASCII bool
	sortKeys    bool
	itemSep     string
	keySep      string
}

// toJSON is tojson: Python json.dumps's layout (", " and ": " separators;
// "," and newlines with an indent), keys in insertion order. Text over
// maxValue bytes, nesting deeper than maxDepth (a list that holds itself)
// and an indent that would make either are errors.
func toJSON(v any, o jsonOpts, depth int) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, o, depth); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSON(b *strings.Builder, v any, o jsonOpts, depth int) error {
	if int64(b.Len()) > maxValue {
		return checkLen(int64(b.Len()))
	}
	if depth > maxDepth {
		return errorf("tojson: nesting deeper than %d (a value that holds itself?)", maxDepth)
	}
	item, key := o.itemSep, o.keySep
	if item == "" {
		item = ", "
		if o.indent > 0 {
			item = ","
		}
	}
	if key == "" {
		key = ": "
	}
	pad := func(d int) error {
		n := repeatSize(o.indent, int64(d), maxValue)
		if err := checkLen(n + int64(b.Len())); err != nil || n < 0 {
			return checkLen(-1)
		}
		b.WriteByte('\n')
		b.WriteString(strings.Repeat(" ", int(n)))
		return nil
	}
	switch v := v.(type) {
	case nil, Undefined:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		switch {
		case math.IsNaN(v):
			b.WriteString("NaN")
		case math.IsInf(v, 1):
			b.WriteString("Infinity")
		case math.IsInf(v, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloatRepr(v))
		}
	case string:
		writeJSONString(b, v, o.ensureASCII)
	case *List:
		if len(v.Items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, x := range v.Items {
			if i > 0 {
				b.WriteString(item)
			}
			if o.indent > 0 {
				if err := pad(depth + 1); err != nil {
					return err
				}
			}
			if err := writeJSON(b, x, o, depth+1); err != nil {
				return err
			}
		}
		if o.indent > 0 {
			if err := pad(depth); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case *Dict:
		if len(v.keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := v.keys
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(item)
			}
			if o.indent > 0 {
				if err := pad(depth + 1); err != nil {
					return err
				}
			}
			writeJSONString(b, k, o.ensureASCII)
			b.WriteString(key)
			if err := writeJSON(b, v.m[k], o, depth+1); err != nil {
				return err
			}
		}
		if o.indent > 0 {
			if err := pad(depth); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		writeJSONString(b, toString(v), o.ensureASCII)
	}
	return nil
}

// writeJSONString escapes as JSON.stringify does (and as Python's
// json.dumps with ensure_ascii=False): quotes, backslashes and control
// characters only.
func writeJSONString(b *strings.Builder, s string, ascii bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case ascii && r >= 0x7f:
				if r > 0xffff {
					r -= 0x10000
					fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// length is len(): characters of a string, items of a list or dict.
func length(v any) (int, bool) {
	switch v := v.(type) {
	case string:
		return utf8.RuneCountInString(v), true
	case *List:
		return len(v.Items), true
	case *Dict:
		return len(v.keys), true
	}
	return 0, false
}

// equal is ==.
// equal compares within the render's budget: every value visited is a
// step, and once the budget is spent the values count as unequal (the
// render fails at its next step).
func (r *renderer) equal(a, b any) bool { return equalDepth(a, b, 0, r) }

// equalDepth compares values nested at most maxDepth deep: deeper (a list
// that holds itself) they are unequal rather than a stack overflow.
func equalDepth(a, b any, depth int, r *renderer) bool {
	if depth > maxDepth {
		return false
	}
	if r != nil {
		r.steps += compareCost(a, b)
		if r.steps > maxSteps || r.expired.Load() {
			return false
		}
	}
	if fa, ok := number(a); ok {
		if fb, ok := number(b); ok {
			return fa == fb
		}
		return false
	}
	switch a := a.(type) {
	case nil:
		return b == nil
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case string:
		s, ok := b.(string)
		return ok && a == s
	case *List:
		l, ok := b.(*List)
		if !ok || len(l.Items) != len(a.Items) {
			return false
		}
		for i := range a.Items {
			if !equalDepth(a.Items[i], l.Items[i], depth+1, r) {
				return false
			}
		}
		return true
	case *Dict:
		d, ok := b.(*Dict)
		if !ok || d.Len() != a.Len() {
			return false
		}
		for _, k := range a.keys {
			x, ok := d.m[k]
			if !ok || !equalDepth(a.m[k], x, depth+1, r) {
				return false
			}
		}
		return true
	}
	return false
}

// number returns a numeric value (booleans count, as in Python).
func number(v any) (float64, bool) {
	switch v := v.(type) {
	case int64:
		return float64(v), true
	case float64:
		return v, true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}
