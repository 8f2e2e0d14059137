package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// Prompts longer than --max-prompt-tokens are refused before they cost
// the router its CPU: a text prompt whose length proves it too long is
// refused before the body is decoded (guardPrompt), any other before a
// byte is tokenized or as soon as the count passes the limit
// (tokenizer.EncodeLimit). The answer is 400, as vLLM and OpenAI answer
// a prompt longer than the model's context (a request the client must
// change, not a body the server cannot take: 413 stays for bodies over
// --max-body-bytes). Every refusal is counted by reason in
// kvrouter_prompts_refused_total and logged at WARN, rate-limited.

// Reasons of kvrouter_prompts_refused_total.
const (
	refusedLength = "length" // the text's length proved it too long
	refusedTokens = "tokens" // the encoder stopped past the limit
)

// promptTokenLimit is --max-prompt-tokens (0: none).
func (s *Server) promptTokenLimit() int {
	if s.opts.Router == nil {
		return 0
	}
	return s.opts.Router.Config().Limits.MaxPromptTokens
}

// limitError wraps a tokenizer's refusal with the flag that set the
// limit, counts it and logs it.
func (s *Server) limitError(model string, err error) error {
	var le *tokenizer.LimitError
	if !errors.As(err, &le) {
		return err
	}
	reason := refusedTokens
	if le.ByLength {
		reason = refusedLength
	}
	s.promptRefused("", model, reason, le.Bytes)
	return &inputError{msg: fmt.Sprintf("%v (max-prompt-tokens %d)", err, le.Limit), counted: true}
}

// promptRefused counts a refused prompt and logs it (rate-limited). The
// endpoint is known before decoding, the model after.
func (s *Server) promptRefused(endpoint, model, reason string, size int) {
	if s.opts.Metrics != nil {
		s.opts.Metrics.PromptsRefused.WithLabelValues(reason).Inc()
	}
	if ok, suppressed := s.promptLog.Allow(time.Now()); ok {
		attrs := []any{"reason", reason, "bytes", size, "limit_tokens", s.promptTokenLimit(), "suppressed", suppressed}
		if endpoint != "" {
			attrs = append(attrs, "endpoint", endpoint)
		}
		if model != "" {
			attrs = append(attrs, "model", model)
		}
		s.log.Warn("refused a prompt over max-prompt-tokens", attrs...)
	}
}

// guardPrompt refuses, before decoding, a body whose top-level "prompt"
// is text too long for every served model: the longest prompt that fits
// is max-prompt-tokens times the bytes a token covers at most (per the
// tokenizer's files), so most bodies are too short to need the check and
// pass untouched. A longer body is read once, its prompt string measured
// without decoding the JSON, and handed on from memory.
func (s *Server) guardPrompt(endpoint string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		limit := s.promptTokenLimit()
		threshold := s.promptCheckThreshold(limit)
		if threshold == 0 || r.ContentLength >= 0 && r.ContentLength <= int64(threshold) {
			h(w, r)
			return
		}
		buf := guardBuffers.Get().(*[]byte)
		body, ok := readBodyOrFail(w, r, s.opts.MaxBodyBytes, *buf)
		if !ok {
			guardBuffers.Put(buf)
			return
		}
		if n, ascii, found := promptTextSize(body); found && n > threshold {
			if m := s.fewestTokens(n, ascii); m > limit {
				*buf = body[:0]
				guardBuffers.Put(buf)
				s.promptRefused(endpoint, "", refusedLength, n)
				writeError(w, http.StatusBadRequest, "prompt of %d bytes has at least %d tokens (the tokenizer's longest token bounds the bytes per token), over the limit of %d (max-prompt-tokens)", n, m, limit)
				return
			}
		}
		// The handler may keep what it reads: this buffer is not reused.
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		h(w, r)
	}
}

// guardBuffers recycles the buffers of refused bodies: a client that
// keeps sending huge prompts does not make the router allocate (and zero)
// megabytes per request.
var guardBuffers = sync.Pool{New: func() any { return new([]byte) }}

// promptCheckThreshold is the longest text prompt, in bytes, that no
// served model can refuse from its length (0: no check, when there is no
// limit, no model, engine tokenization, or a tokenizer without a bound).
func (s *Server) promptCheckThreshold(limit int) int {
	m := s.opts.Models
	if limit <= 0 || m == nil || m.Engine != nil || len(m.byName) == 0 {
		return 0
	}
	threshold := 0
	for _, sm := range m.byName {
		if sm.tok == nil {
			return 0
		}
		b := sm.tok.Bound()
		per := b.ASCIIBytesPerToken
		if per == 0 {
			per = b.BytesPerToken
		}
		if per == 0 {
			return 0
		}
		if t := limit * per; threshold == 0 || t < threshold {
			threshold = t
		}
	}
	return threshold
}

// fewestTokens is the fewest tokens any served model can make of a text
// of n bytes, ascii of them ASCII.
func (s *Server) fewestTokens(n, ascii int) int {
	fewest := -1
	for _, sm := range s.opts.Models.byName {
		if m := sm.tok.Bound().MinTokens(n, ascii); fewest < 0 || m < fewest {
			fewest = m
		}
	}
	return max(fewest, 0)
}

// promptTextSize measures the top-level "prompt" of a JSON object when it
// is a string or a list starting with one: the decoded text's length and
// its ASCII bytes, found without decoding (found false otherwise, or when
// the object is malformed up to there: the decoder reports that).
func promptTextSize(body []byte) (n, ascii int, found bool) {
	_, end, found := findTopLevel(body, "prompt", func(b []byte, start int) (int, bool) {
		i := start
		if i < len(b) && b[i] == '[' {
			i = skipWS(b, i+1)
		}
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		var end int
		var ok bool
		end, n, ascii, ok = jsonStringSize(b, i)
		if ok && b[start] == '[' { // a list: its end
			end, ok = skipValue(b, start)
		}
		return end, ok
	})
	// encoding/json takes the last of repeated keys, matched without
	// case (and unescaped): this "prompt" is the one decoded only when no
	// later key can be another.
	return n, ascii, found && noLaterKey(body, end, "prompt")
}

// noLaterKey reports whether the object's members after the value ending
// at i are well formed and none is key (case-insensitively, or escaped).
func noLaterKey(b []byte, i int, key string) bool {
	for {
		i = skipWS(b, i)
		if i < len(b) && b[i] == '}' {
			return true
		}
		if i >= len(b) || b[i] != ',' {
			return false
		}
		i = skipWS(b, i+1)
		if i >= len(b) || b[i] != '"' {
			return false
		}
		kEnd, ok := skipString(b, i)
		if !ok {
			return false
		}
		name := b[i+1 : kEnd-1]
		if bytes.IndexByte(name, '\\') >= 0 || bytes.EqualFold(name, []byte(key)) {
			return false
		}
		i = skipWS(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		if i, ok = skipValue(b, skipWS(b, i+1)); !ok {
			return false
		}
	}
}

// jsonStringSize returns the end of the JSON string starting at b[i] and
// the length and ASCII bytes of its decoded text (as encoding/json
// decodes it: a lone surrogate escape is U+FFFD). Escape-free stretches
// are measured whole, so a long plain string costs a memchr.
func jsonStringSize(b []byte, i int) (end, n, ascii int, ok bool) {
	j, quote := i+1, -1
	for {
		if quote < j {
			k := bytes.IndexByte(b[j:], '"')
			if k < 0 {
				return 0, 0, 0, false
			}
			quote = j + k
		}
		k := bytes.IndexByte(b[j:quote], '\\')
		if k < 0 {
			n += quote - j
			ascii += tokenizer.CountASCII(b[j:quote])
			return quote + 1, n, ascii, true
		}
		n += k
		ascii += tokenizer.CountASCII(b[j : j+k])
		j += k
		if j+1 >= len(b) {
			return 0, 0, 0, false
		}
		if b[j+1] != 'u' {
			n++
			ascii++
			j += 2
			continue
		}
		r, ok := hex4(b, j+2)
		if !ok {
			return 0, 0, 0, false
		}
		j += 6
		if r >= 0xD800 && r < 0xDC00 && j+6 <= len(b) && b[j] == '\\' && b[j+1] == 'u' {
			if lo, ok := hex4(b, j+2); ok && lo >= 0xDC00 && lo < 0xE000 {
				n += 4
				j += 6
				continue
			}
		}
		if r >= 0xD800 && r < 0xE000 {
			r = utf8.RuneError
		}
		n += utf8.RuneLen(r)
		if r < 0x80 {
			ascii++
		}
	}
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return rune(v), err == nil
}
