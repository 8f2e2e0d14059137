package httpapi

import (
	"bytes"
)

// Prompts are thousands of integers, and encoding/json scans a body twice
// (validation, then decoding) through a byte-at-a-time state machine: on
// a 4k-token prompt that was 60% of a routing decision's CPU. So the API
// lifts the top-level "token_ids" array out of the body, parses it with
// TokenIDs' direct integer scanner, and leaves encoding/json only the
// small remainder (with the array replaced by null), which it decodes
// strictly: every key but token_ids goes through unmarshalStrict, so an
// unknown key is refused on this path as on the others.

// unmarshalWithTokens is unmarshalStrict(body, dst, extra) parsing the
// top-level "token_ids" array into *tokens by the fast path. When the
// body is not a well-formed object the fast path steps aside and
// encoding/json reports the error as usual.
func unmarshalWithTokens(body []byte, dst any, tokens **TokenIDs, extra string) error {
	// A recycled buffer may be pre-set in *tokens; it must never stand in
	// for an absent token_ids.
	reuse := *tokens
	*tokens = nil
	start, end, ok := findTopLevelArray(body, "token_ids")
	if !ok {
		return unmarshalStrict(body, dst, extra)
	}
	var ids TokenIDs
	if reuse != nil {
		ids = (*reuse)[:0]
	}
	if err := ids.UnmarshalJSON(body[start:end]); err != nil {
		return err // names the element: "token_ids[3]: ..."
	}
	rest := make([]byte, 0, len(body)-(end-start)+4)
	rest = append(rest, body[:start]...)
	rest = append(rest, "null"...)
	rest = append(rest, body[end:]...)
	if err := unmarshalStrict(rest, dst, extra); err != nil {
		return err
	}
	*tokens = &ids
	return nil
}

// findTopLevelArray returns the span of the array value of key in a JSON
// object, if the object's structure (up to that value) is well formed.
func findTopLevelArray(b []byte, key string) (int, int, bool) {
	return findTopLevel(b, key, arrayEnd)
}

// findTopLevelValue returns the span of key's value in a JSON object when
// the object's structure up to it is well formed (encoding/json has
// validated the whole body before this runs). The key is matched exactly,
// as written (not JSON-unescaped, not case-folded).
func findTopLevelValue(b []byte, key string) (int, int, bool) {
	return findTopLevel(b, key, skipValue)
}

// findTopLevel walks a JSON object's top-level members up to key and
// returns the span of its value, whose end valueEnd finds (the members
// before it are skipped with skipValue).
func findTopLevel(b []byte, key string, valueEnd func([]byte, int) (int, bool)) (int, int, bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	i++
	for {
		i = skipWS(b, i)
		if i >= len(b) || b[i] != '"' {
			return 0, 0, false
		}
		kEnd, ok := skipString(b, i)
		if !ok {
			return 0, 0, false
		}
		name := b[i+1 : kEnd-1]
		i = skipWS(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		i = skipWS(b, i+1)
		if string(name) == key {
			end, ok := valueEnd(b, i)
			return i, end, ok
		}
		vEnd, ok := skipValue(b, i)
		if !ok {
			return 0, 0, false
		}
		i = skipWS(b, vEnd)
		if i >= len(b) || b[i] != ',' {
			return 0, 0, false // '}' (key absent) or malformed
		}
		i++
	}
}

// dropTopLevelMember returns b without its first top-level member named
// key (the key, its value and one separating comma), when b is an object
// well formed up to that member's end; ok is false otherwise. The result
// is a new slice: b is not modified.
func dropTopLevelMember(b []byte, key string) ([]byte, bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i++
	prevEnd := -1 // end of the previous member's value (its comma follows)
	for {
		i = skipWS(b, i)
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		kStart := i
		kEnd, ok := skipString(b, i)
		if !ok {
			return nil, false
		}
		name := b[i+1 : kEnd-1]
		i = skipWS(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		vEnd, ok := skipValue(b, skipWS(b, i+1))
		if !ok {
			return nil, false
		}
		next := skipWS(b, vEnd)
		if next >= len(b) || b[next] != ',' && b[next] != '}' {
			return nil, false
		}
		if string(name) == key {
			out := make([]byte, 0, len(b))
			switch {
			case b[next] == ',': // a member follows: drop through its comma
				out = append(append(out, b[:kStart]...), b[next+1:]...)
			case prevEnd >= 0: // the last of several: drop from the comma before it
				out = append(append(out, b[:prevEnd]...), b[vEnd:]...)
			default: // the only member
				out = append(append(out, b[:kStart]...), b[vEnd:]...)
			}
			return out, true
		}
		if b[next] == '}' {
			return nil, false // key absent
		}
		prevEnd, i = vEnd, next+1
	}
}

// arrayEnd is the end of a token array starting at i: it holds only
// numbers, so its end is the first ']' (anything else in it fails
// TokenIDs' own parse).
func arrayEnd(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '[' {
		return 0, false
	}
	end := bytes.IndexByte(b[i:], ']')
	if end < 0 {
		return 0, false
	}
	return i + end + 1, true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i].
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// skipValue returns the index just past the value starting at b[i]. It
// tracks nesting and strings only; encoding/json validates the rest.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && !isSpace(b[j]) {
			j++
		}
		return j, j > i
	}
}
