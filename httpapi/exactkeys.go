package httpapi

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// encoding/json matches a key to a field case-insensitively, so with
// DisallowUnknownFields "Token_IDs" still fills token_ids (and escapes
// the fast path, which matches exactly). checkExactKeys refuses such a
// key as unknown: every key the router reads is spelled one way.

// checkExactKeys reports the first key of the JSON object data (which
// encoding/json has decoded into a value of type t) that is not spelled
// exactly as a field's name, at every depth where the value is a struct.
func checkExactKeys(data []byte, t reflect.Type) error {
	fields := structFields(t)
	if fields == nil {
		return nil
	}
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil // null, or not an object: the decoder judged it
	}
	i++
	for {
		i = skipWS(data, i)
		if i < len(data) && data[i] == '}' {
			return nil
		}
		if i >= len(data) || data[i] != '"' {
			return nil
		}
		kEnd, ok := skipString(data, i)
		if !ok {
			return nil
		}
		name := data[i+1 : kEnd-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			var s string
			if err := json.Unmarshal(data[i:kEnd], &s); err != nil {
				return nil
			}
			name = []byte(s)
		}
		i = skipWS(data, kEnd)
		if i >= len(data) || data[i] != ':' {
			return nil
		}
		vStart := skipWS(data, i+1)
		vEnd, ok := skipValue(data, vStart)
		if !ok {
			return nil
		}
		ft, known := fields[string(name)] // no allocation: the conversion is the map index
		if !known {
			return &unknownFieldError{name: strconv.Quote(string(name))}
		}
		if err := checkExactKeys(data[vStart:vEnd], ft); err != nil {
			return err
		}
		i = skipWS(data, vEnd)
		if i < len(data) && data[i] == ',' {
			i++
		}
	}
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type (nil: not a struct the check enters)

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// structFields is the JSON field names of struct type t (through
// pointers, promoted from embedded structs) and their types; nil when t
// is not a struct or decodes itself.
func structFields(t reflect.Type) map[string]reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v, ok := fieldCache.Load(t); ok {
		return v.(map[string]reflect.Type)
	}
	var out map[string]reflect.Type
	pt := reflect.PointerTo(t)
	if t.Kind() == reflect.Struct && !pt.Implements(jsonUnmarshaler) && !pt.Implements(textUnmarshaler) {
		out = map[string]reflect.Type{}
		addFields(out, t)
	}
	fieldCache.Store(t, out)
	return out
}

func addFields(out map[string]reflect.Type, t reflect.Type) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(out, ft)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
}
