package httpapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// TokenIDs decodes a JSON array of token ids without going through
// interface values or float64: prompts are thousands of integers and this
// is the routing hot path. Anything but non-negative integers that fit in
// uint32 is an error naming the offending element.
type TokenIDs []uint32

func (t *TokenIDs) UnmarshalJSON(b []byte) error { return t.parse(b, true) }

// parse is UnmarshalJSON; with eightBytes false every byte goes through
// the byte loop, which BenchmarkTokenIDs4kDistinct compares against.
func (t *TokenIDs) parse(b []byte, eightBytes bool) error {
	b = trimJSONSpace(b) // not bytes.TrimSpace: JSON's whitespace is narrower
	if bytes.Equal(b, []byte("null")) {
		*t = nil
		return nil
	}
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return errors.New("token_ids must be an array of integers")
	}
	body := b[1 : len(b)-1]
	// Reuse the slice's array when it is large enough (as encoding/json
	// does for slices): the route handler recycles token buffers.
	out := (*t)[:0]
	if want := len(body)/5 + 1; cap(out) < want {
		out = make([]uint32, 0, want)
	}
	// The common case, a number of one to seven digits and a comma
	// (and the space Python's json.dumps puts after it), is read eight
	// bytes at a time (swarIDs); whatever it does not take, from a longer
	// number or unusual whitespace to any error, this loop reads: one pass
	// over the bytes with a single branch per byte in the common case.
	// expectValue is false right after a number (a comma or the end must
	// follow) and true after a comma, which is where swarIDs stops.
	i := 0
	if eightBytes {
		out, i = swarIDs(out, body)
	}
	expectValue := true
	for i < len(body) {
		c := body[i]
		switch {
		case c-'0' <= 9:
			if !expectValue {
				return fmt.Errorf("token_ids[%d]: want a non-negative integer", len(out)-1)
			}
			start := i
			v := uint64(c - '0')
			for i++; i < len(body); i++ {
				d := body[i] - '0'
				if d > 9 {
					break
				}
				v = v*10 + uint64(d) // wraps past 19 digits; rejected below by the count
			}
			digits := i - start
			if c == '0' && digits > 1 {
				// JSON forbids leading zeros ("007"); so do we.
				return fmt.Errorf("token_ids[%d]: want a non-negative integer", len(out))
			}
			if digits > 10 || v > 1<<32-1 {
				return fmt.Errorf("token_ids[%d]: value does not fit in uint32", len(out))
			}
			out = append(out, uint32(v))
			expectValue = false
		case c == ',':
			if expectValue {
				return fmt.Errorf("token_ids[%d]: want a non-negative integer", len(out))
			}
			expectValue = true
			i++
		case isSpace(c):
			i++
		default:
			if expectValue {
				return fmt.Errorf("token_ids[%d]: want a non-negative integer", len(out))
			}
			return fmt.Errorf("token_ids[%d]: want a non-negative integer", len(out)-1)
		}
	}
	if expectValue && len(out) > 0 {
		return errors.New("token_ids: trailing comma")
	}
	*t = out
	return nil
}

// swarIDs appends the ids at the start of body while each is one to seven
// digits without a leading zero followed by a comma, and an optional
// space after the comma, and returns the offset of the first byte it did
// not take. Each id is found and converted from one 8-byte load with no
// branch on its length. The byte loop alone branched on every digit, and
// on real prompts, whose ids mix lengths, it mispredicted the end of
// about every other id: 46-57 us per 4k-token array of Zipf-distributed
// ids against 29-33 us for ids of one length (BenchmarkTokenIDs4kDistinct
// has both, and the byte loop beside this one).
func swarIDs(out []uint32, body []byte) ([]uint32, int) {
	i := 0
	for {
		// Ids go straight into the spare capacity, which grows when it
		// runs out; an id takes at least two bytes, so half the rest of
		// body is room for all.
		room := out[len(out):cap(out)]
		if len(room) == 0 {
			out = slices.Grow(out, min((len(body)-i)/2+1, 4096))
			room = out[len(out):cap(out)]
		}
		var j int
		j, i = swarRun(room, body, i)
		out = out[:len(out)+j]
		if j < len(room) {
			return out, i
		}
	}
}

// swarRun is swarIDs' loop, from body[i] into room until room is full or
// an id is not the common case. It is a function of its own so that the
// loop holds nothing else in registers: with the caller's values live,
// the compiler reloaded five of them from the stack on every id.
func swarRun(room []uint32, body []byte, i int) (int, int) {
	const (
		zeros    = 0x3030303030303030 // '0' in every byte
		low7     = 0x7f7f7f7f7f7f7f7f
		tenUp    = 0x7676767676767676 // 0x80 - 10: a byte of 10 or more reaches its high bit
		high     = 0x8080808080808080
		oneByte  = 0x000000ff000000ff
		mulPairs = 100 + 1000000<<32 // digit pairs to 4-digit groups (Lemire's eight-digit parse)
		mulQuads = 1 + 10000<<32
	)
	j := 0
	// i+8 < len(body): the load, the comma within it and the space check
	// after it stay inside body.
	for ; j < len(room) && i+8 < len(body); j++ {
		w := binary.LittleEndian.Uint64(body[i : i+8])
		d := w ^ zeros // a digit byte becomes its value, 0-9; any other byte is 10 or more
		nonDigit := ((d & low7) + tenUp | d) & high
		n := bits.TrailingZeros64(nonDigit) >> 3 // leading digits, 0-8
		if uint(n-1) > 6 || d&0xff == 0 && n > 1 || byte(w>>(8*n)) != ',' {
			break
		}
		// The n digits to the top bytes, zeros below them: an eight-digit
		// number with leading zeros, read in three multiplies.
		x := d << (64 - 8*n)
		x = x*10 + x>>8
		x = ((x&oneByte)*mulPairs + (x>>16&oneByte)*mulQuads) >> 32
		room[j] = uint32(x)
		i += n + 1
		if body[i] == ' ' {
			i++
		}
	}
	return j, i
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// trimJSONSpace trims JSON whitespace (space, tab, CR, LF) from both ends.
func trimJSONSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// errorBody is every error response: {"error": "..."} plus optional
// queue figures on 429.
type errorBody struct {
	Error      string `json:"error"`
	QueueDepth *int   `json:"queue_depth,omitempty"`
	QueueLimit *int   `json:"queue_limit,omitempty"`
	// Reason names the bound a 429 hit (routeapi.Reason*).
	Reason string `json:"reason,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// The status is sent: an error here is the client gone mid-answer,
	// which nothing can be done about.
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, errorBody{Error: fmt.Sprintf(format, args...)})
}

// jsonBody says how decodeJSON reads a route's body.
type jsonBody struct {
	endpoint string // the refusal counter's endpoint label
	dst      any
	// buf is read into when it is large enough, and left holding the
	// buffer used, for recycling (nil: a new buffer).
	buf *[]byte
	// tokens, when non-nil, receives the body's "token_ids" by the fast
	// path (fastjson.go).
	tokens **TokenIDs
	// extra is one more top-level key accepted although dst has no field
	// of that name: the session body field, which the handler reads from
	// the raw body ("" = none).
	extra string
}

// decodeJSON reads a JSON object into b.dst with the server's size limit.
// A key dst does not have is refused: a field the router would silently
// ignore is a request that does not do what its author thinks. On failure
// it answers the client itself (413 or 400 with the reason), counts the
// refusal by endpoint and reason, and returns false.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, b jsonBody) bool {
	var reuse []byte
	if b.buf != nil {
		reuse = (*b.buf)[:0]
	}
	body, err := readBody(w, r, s.opts.MaxBodyBytes, reuse)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.bodyRefused(b.endpoint, "too_large")
			writeError(w, http.StatusRequestEntityTooLarge, "request body larger than %d bytes", s.opts.MaxBodyBytes)
		} else {
			s.bodyRefused(b.endpoint, "read")
			writeError(w, http.StatusBadRequest, "read body: %v", err)
		}
		return false
	}
	if b.buf != nil {
		*b.buf = body
	}
	if len(trimJSONSpace(body)) == 0 {
		s.bodyRefused(b.endpoint, "empty")
		writeError(w, http.StatusBadRequest, "empty body: want a JSON object")
		return false
	}
	if b.tokens != nil {
		err = unmarshalWithTokens(body, b.dst, b.tokens, b.extra)
	} else {
		err = unmarshalStrict(body, b.dst, b.extra)
	}
	if err == nil {
		return true
	}
	var unknown *unknownFieldError
	if errors.As(err, &unknown) {
		s.bodyRefused(b.endpoint, "unknown_field")
		writeError(w, http.StatusBadRequest, "%v", err)
		return false
	}
	s.bodyRefused(b.endpoint, "malformed")
	writeError(w, http.StatusBadRequest, "malformed JSON: %s", describeJSONError(err))
	return false
}

// bodyRefused counts a request body refused before its handler ran.
func (s *Server) bodyRefused(endpoint, reason string) {
	if s.opts.Metrics != nil {
		s.opts.Metrics.BodiesRefused.WithLabelValues(endpoint, reason).Inc()
	}
}

// unknownFieldError is a body key its route does not read.
type unknownFieldError struct{ name string }

func (e *unknownFieldError) Error() string { return "unknown field " + e.name }

// unmarshalStrict decodes the JSON object in data into dst, as
// json.Unmarshal does, but refuses a key dst has no field for, at any
// depth, with an *unknownFieldError naming it; a key must be spelled as
// its field is (json.Unmarshal would match "Token_IDs" to token_ids). A
// top-level key equal to extra (when not "") is accepted and skipped.
func unmarshalStrict(data []byte, dst any, extra string) error {
	err := decodeDisallowingUnknown(data, dst)
	var unknown *unknownFieldError
	if extra != "" && errors.As(err, &unknown) && unknown.name == strconv.Quote(extra) {
		// The extra key (the session field, in the request rarely) is
		// cut out and the rest decoded again: a retry rather than a
		// pre-scan keeps a body that has no extra key to one decode.
		if rest, ok := dropTopLevelMember(data, extra); ok {
			data = rest
			err = decodeDisallowingUnknown(data, dst)
		}
	}
	if err != nil {
		return err
	}
	return checkExactKeys(data, reflect.TypeOf(dst))
}

func decodeDisallowingUnknown(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		// encoding/json names the field only in its message.
		if name, found := strings.CutPrefix(err.Error(), "json: unknown field "); found {
			return &unknownFieldError{name: name}
		}
		return err
	}
	if off := dec.InputOffset(); len(trimJSONSpace(data[off:])) > 0 {
		return fmt.Errorf("data after the object (at byte %d)", off)
	}
	return nil
}

func describeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return fmt.Sprintf("field %q: got JSON %s, want %s", field, typeErr.Value, typeErr.Type)
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return fmt.Sprintf("%v (at byte %d)", syntaxErr, syntaxErr.Offset)
	}
	return err.Error()
}

func parseUint(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }

// readBodyOrFail is readBody that answers the client itself (413 for a
// body over limit, 400 otherwise) and returns false on failure: the
// OpenAI routes' reader, whose bodies carry fields for the engine.
func readBodyOrFail(w http.ResponseWriter, r *http.Request, limit int64, buf []byte) ([]byte, bool) {
	body, err := readBody(w, r, limit, buf)
	if err == nil {
		return body, true
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "request body larger than %d bytes", limit)
	} else {
		writeError(w, http.StatusBadRequest, "read body: %v", err)
	}
	return nil, false
}

// readBody reads a whole body under limit, sized from Content-Length
// when the client sent one (prompts are tens of kilobytes; growing a
// buffer by doubling copies them several times).
func readBody(w http.ResponseWriter, r *http.Request, limit int64, buf []byte) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	if r.ContentLength <= 0 || r.ContentLength > limit {
		return io.ReadAll(rd)
	}
	if int64(cap(buf)) >= r.ContentLength {
		buf = buf[:r.ContentLength]
	} else {
		buf = make([]byte, r.ContentLength)
	}
	if _, err := io.ReadFull(rd, buf); err != nil {
		return nil, err
	}
	// A body longer than announced is an error too.
	var one [1]byte
	if k, _ := rd.Read(one[:]); k > 0 { // only whether a byte arrived matters: io.EOF is the expected answer
		return nil, errors.New("body longer than its Content-Length")
	}
	return buf, nil
}
