package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// scanner is a small JSON reader for the few fixed shapes the router
// ingests. Events arrive at fleet rates and every replica decodes every
// one of them, so it avoids encoding/json's reflection and intermediate
// copies: it walks the bytes once, hands keys out as sub-slices, and
// parses numbers straight into uint64.
//
// It accepts only valid JSON (RFC 8259): anything it does not interpret
// is still checked while skipped. Keys are matched exactly
// (case-sensitive) and a known key may appear once, as serde does for
// Dynamo's structs.
type scanner struct {
	data  []byte
	pos   int
	depth int
	// unknownType is the name of an event type the current event's data
	// has and the decoder does not know ("" if none); see routerEvent.
	unknownType string
	// unknownKeys counts object keys the decoder does not use (a newer
	// Dynamo's fields); unknownNames keeps the first few distinct ones for
	// the report. The events are still applied, and the consumer counts
	// and logs what was not used, so a new field is never silent.
	unknownKeys  int
	unknownNames []string
}

// isKnownUnused reports Dynamo's RouterEvent fields that this router
// knows and deliberately does not use (docs/events.md): they are skipped
// without a report, so the report names only fields it has never heard of.
// start_position and mm_extra_info come with every stored event of
// Dynamo's publishers (null for text), so reporting them would bury a
// real new field.
func isKnownUnused(key []byte) bool {
	switch string(key) {
	case "start_position", "mm_extra_info", "state_source", "session_id":
		return true
	}
	return false
}

// maxUnknownNames bounds the distinct unknown key names one message
// reports (a hostile message can carry any number of keys).
const maxUnknownNames = 4

// unknownKey skips the value of a key the decoder does not use and
// records the key for the message's report.
func (s *scanner) unknownKey(key []byte) error {
	if isKnownUnused(key) {
		return s.skip()
	}
	s.unknownKeys++
	if len(s.unknownNames) < maxUnknownNames && !slices.Contains(s.unknownNames, string(key)) {
		s.unknownNames = append(s.unknownNames, truncate(string(key)))
	}
	return s.skip()
}

// maxDepth bounds nesting in skipped values so hostile input cannot
// recurse without limit.
const maxDepth = 512

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte without consuming it, 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// end checks that only whitespace follows the top-level value.
func (s *scanner) end() error {
	s.ws()
	if s.pos != len(s.data) {
		return s.errorf("unexpected data after the top-level value")
	}
	return nil
}

// null consumes a null literal if one comes next.
func (s *scanner) null() bool {
	if s.peek() == 'n' && bytes.HasPrefix(s.data[s.pos:], []byte("null")) {
		s.pos += 4
		return true
	}
	return false
}

// object reads an object, calling member for each key with the scanner
// positioned at the value; member must consume the value.
func (s *scanner) object(member func(key []byte) error) error {
	if s.peek() != '{' {
		return s.errorf("want an object")
	}
	s.pos++
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.errorf("want an object key")
		}
		key, err := s.str()
		if err != nil {
			return err
		}
		if s.peek() != ':' {
			return s.errorf("want ':' after key %q", truncate(string(key)))
		}
		s.pos++
		if err := member(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or '}' in object")
		}
	}
}

// array reads an array, calling elem for each element; elem must consume
// it.
func (s *scanner) array(elem func(i int) error) error {
	if s.peek() != '[' {
		return s.errorf("want an array")
	}
	s.pos++
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or ']' in array")
		}
	}
}

// str reads a string and returns its content. Without escapes that is a
// sub-slice of the input (no copy); with escapes it is decoded.
func (s *scanner) str() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.errorf("want a string")
	}
	start := s.pos
	s.pos++
	escaped := false
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			if !escaped {
				return s.data[start+1 : s.pos-1], nil
			}
			var out string
			if err := json.Unmarshal(s.data[start:s.pos], &out); err != nil {
				return nil, s.errorf("bad string: %v", err)
			}
			return []byte(out), nil
		case c == '\\':
			escaped = true
			if err := s.escape(); err != nil {
				return nil, err
			}
		case c < 0x20:
			return nil, s.errorf("control character in string")
		default:
			s.pos++
		}
	}
	return nil, s.errorf("unterminated string")
}

// escape checks one escape sequence at s.pos (the backslash) and moves
// past it.
func (s *scanner) escape() error {
	if s.pos+1 >= len(s.data) {
		return s.errorf("unterminated escape")
	}
	switch s.data[s.pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.pos += 2
		return nil
	case 'u':
		if s.pos+6 > len(s.data) {
			return s.errorf("short \\u escape")
		}
		for _, h := range s.data[s.pos+2 : s.pos+6] {
			if !isHex(h) {
				return s.errorf("bad \\u escape")
			}
		}
		s.pos += 6
		return nil
	}
	return s.errorf("bad escape \\%c", s.data[s.pos+1])
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number reads a JSON number and returns its text.
func (s *scanner) number() ([]byte, error) {
	s.ws()
	start := s.pos
	if s.pos < len(s.data) && s.data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(s.data) && s.data[s.pos] == '0':
		s.pos++
	case s.pos < len(s.data) && '1' <= s.data[s.pos] && s.data[s.pos] <= '9':
		s.digits()
	default:
		return nil, s.errorf("want a number")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return nil, s.errorf("want digits after '.'")
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return nil, s.errorf("want digits in exponent")
		}
	}
	return s.data[start:s.pos], nil
}

func (s *scanner) digits() int {
	n := 0
	for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
		s.pos++
		n++
	}
	return n
}

// u64 reads an integer in uint64 range, or a negative one in int64 range
// reinterpreted bit for bit (engines that hash into i64 send those).
// Fractions and exponents are refused rather than rounded.
func (s *scanner) u64() (uint64, error) {
	text, err := s.number()
	if err != nil {
		return 0, err
	}
	if text[0] == '-' {
		i, err := strconv.ParseInt(string(text), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s is not a 64-bit integer", truncate(string(text)))
		}
		return uint64(i), nil
	}
	var u uint64
	for _, c := range text {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%s is not a 64-bit integer", truncate(string(text)))
		}
		d := uint64(c - '0')
		if u > (^uint64(0)-d)/10 {
			return 0, fmt.Errorf("%s is not a 64-bit integer", truncate(string(text)))
		}
		u = u*10 + d
	}
	return u, nil
}

// skip consumes any value, checking its syntax.
func (s *scanner) skip() error {
	switch c := s.peek(); {
	case c == '{' || c == '[':
		s.depth++
		defer func() { s.depth-- }()
		if s.depth > maxDepth {
			return s.errorf("nesting deeper than %d", maxDepth)
		}
		if c == '{' {
			return s.object(func([]byte) error { return s.skip() })
		}
		return s.array(func(int) error { return s.skip() })
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || '0' <= c && c <= '9':
		_, err := s.number()
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.errorf("want a JSON value")
}

func (s *scanner) literal(word string) error {
	if !bytes.HasPrefix(s.data[s.pos:], []byte(word)) {
		return s.errorf("want %s", word)
	}
	s.pos += len(word)
	return nil
}
