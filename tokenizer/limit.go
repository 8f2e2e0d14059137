package tokenizer

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"unsafe"
)

// Token limits: a prompt longer than the router accepts is refused from
// its length alone when its length proves it too long, and otherwise the
// encoder stops as soon as its count passes the limit. Neither ever
// refuses a text that fits: both rest on a lower bound of the token count
// that holds for every text, derived from the tokenizer's own files.
//
// A token of the model covers at most pieceBytes bytes of the text the
// model sees (the longest vocabulary entry, in bytes; for byte-level
// vocabularies the bytes its characters stand for). Between the input
// text and the model: added tokens (one token each, at most their content
// long), the normalizer (which may shrink text: NFC composes, lowercase
// maps U+212A KELVIN SIGN, 3 bytes, to "k"), the pre-tokenizer (which
// must keep every byte) and the model's handling of characters it has no
// token for (which must not drop or fuse them). Where any step can make
// text vanish (Strip, a regex Replace, WhitespaceSplit, a Removed split,
// added tokens that strip the spaces next to them, unknown characters
// dropped or fused), there is no bound from length, and only the
// encoder's stop applies.

// ErrTooManyTokens is wrapped by every LimitError.
var ErrTooManyTokens = errors.New("prompt is longer than the token limit")

// LimitError is a text that encodes to more tokens than the limit.
type LimitError struct {
	Limit int
	// ByLength: refused from the text's length, before any tokenization
	// work; MinTokens is the lower bound that proved it too long.
	ByLength  bool
	Bytes     int
	MinTokens int
	// Tokens is how many tokens the encoder had produced when it stopped
	// (ByLength false): past Limit, or short of it by less than the
	// fewest tokens the next piece can make.
	Tokens int
}

func (e *LimitError) Error() string {
	if e.ByLength {
		return fmt.Sprintf("prompt of %d bytes has at least %d tokens (the tokenizer's longest token bounds the bytes per token), over the limit of %d", e.Bytes, e.MinTokens, e.Limit)
	}
	return fmt.Sprintf("prompt has more than %d tokens (tokenization stopped after %d tokens, where the count was sure to pass the limit)", e.Limit, e.Tokens)
}

func (e *LimitError) Unwrap() error { return ErrTooManyTokens }

// Bound bounds how much text one token covers.
type Bound struct {
	// BytesPerToken: every token covers at most this many bytes of the
	// input text (0: no bound).
	BytesPerToken int
	// ASCIIBytesPerToken: every token covers at most this many ASCII
	// bytes of the input text (0: no bound). Tighter than BytesPerToken
	// when the normalizer may shrink non-ASCII text but never ASCII.
	ASCIIBytesPerToken int
}

// MinTokens is a lower bound on the tokens of a text of n bytes, ascii of
// them ASCII (special tokens the post-processor adds not counted).
func (b Bound) MinTokens(n, ascii int) int {
	m := 0
	if b.BytesPerToken > 0 {
		m = ceilDiv(n, b.BytesPerToken)
	}
	if b.ASCIIBytesPerToken > 0 {
		m = max(m, ceilDiv(ascii, b.ASCIIBytesPerToken))
	}
	return m
}

// MaxBytes is the longest text, in bytes, that can encode to limit
// tokens or fewer (0: no bound).
func (b Bound) MaxBytes(limit int) int {
	if b.BytesPerToken <= 0 || limit <= 0 {
		return 0
	}
	return limit * b.BytesPerToken
}

// Bound returns the tokenizer's bound on the text one token covers.
func (t *Tokenizer) Bound() Bound { return t.bound }

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// CountASCII returns how many bytes of s are ASCII.
func CountASCII[T string | []byte](s T) int {
	// A read-only view of the bytes, to load them eight at a time.
	var b []byte
	switch v := any(s).(type) {
	case string:
		b = unsafe.Slice(unsafe.StringData(v), len(v))
	case []byte:
		b = v
	}
	n, high := len(b), 0
	const mask = 0x8080808080808080
	for len(b) >= 32 {
		// The high bits of four words, shifted apart: one popcount.
		w := binary.LittleEndian.Uint64(b)&mask | binary.LittleEndian.Uint64(b[8:])&mask>>1 |
			binary.LittleEndian.Uint64(b[16:])&mask>>2 | binary.LittleEndian.Uint64(b[24:])&mask>>3
		high += bits.OnesCount64(w)
		b = b[32:]
	}
	for _, c := range b {
		high += int(c >> 7)
	}
	return n - high
}

// EncodeLimit is Encode refusing a text of more than limit tokens (limit
// <= 0: no limit), special tokens included: from its length when that
// proves it too long, else as soon as the count passes limit. The error
// is a *LimitError.
func (t *Tokenizer) EncodeLimit(text string, addSpecial bool, limit int) ([]uint32, error) {
	if limit <= 0 {
		return t.Encode(text, addSpecial), nil
	}
	specials := 0
	if addSpecial && t.post != nil {
		specials = len(t.post.prefix) + len(t.post.suffix)
	}
	if m := t.minTokens(text) + specials; m > limit {
		return nil, &LimitError{Limit: limit, ByLength: true, Bytes: len(text), MinTokens: m}
	}
	dst, ok := t.appendEncode(make([]uint32, 0, min(len(text)/3, limit)+4), text, addSpecial, limit)
	if !ok {
		return nil, &LimitError{Limit: limit, Bytes: len(text), Tokens: len(dst)}
	}
	return dst, nil
}

// minTokens is Bound.MinTokens of text, counting its ASCII bytes only
// when the byte count alone does not decide.
func (t *Tokenizer) minTokens(text string) int {
	b := t.bound
	if b.BytesPerToken == 0 {
		return 0
	}
	m := ceilDiv(len(text), b.BytesPerToken)
	if b.ASCIIBytesPerToken > 0 && ceilDiv(len(text), b.ASCIIBytesPerToken) > m {
		m = b.MinTokens(len(text), CountASCII(text))
	}
	return m
}

// deriveBound computes the tokenizer's Bound and the model's pieceBytes
// (see the top of this file); zero values mean no bound.
func (t *Tokenizer) deriveBound(normalizerJSON, preTokenizerJSON json.RawMessage) {
	m := t.model
	piece := 0
	if m.byteLevel {
		for raw := range m.rawVocab {
			piece = max(piece, len(raw))
		}
	} else {
		for tok := range m.vocab {
			piece = max(piece, len(tok))
		}
	}
	fallback := m.byteFallback
	for b := range 256 {
		fallback = fallback && m.fallbackIDs[b] >= 0
	}
	unknownKept := fallback || m.unk >= 0 && !m.fuseUnk
	if !unknownKept {
		if !m.byteLevel {
			return // an unknown character would vanish (or fuse with the next)
		}
		for b := range 256 {
			if m.byteIDs[b] < 0 {
				return
			}
		}
	}
	if !m.byteLevel && !fallback {
		piece = max(piece, 4) // one unknown token per character
	}
	keepsAll, err := preTokenizerKeepsAll(preTokenizerJSON)
	if err != nil || !keepsAll || piece == 0 {
		return
	}
	t.pieceBytes = piece
	added := 0
	for _, a := range t.added {
		if a.LStrip || a.RStrip {
			return // the whitespace next to it vanishes, however long
		}
		added = max(added, len(a.Content))
	}
	shrink, asciiKept, ok := normalizerShrink(normalizerJSON)
	if !ok {
		return
	}
	t.bound.BytesPerToken = max(shrink*piece, added)
	if asciiKept {
		t.bound.ASCIIBytesPerToken = max(piece, added)
	}
}

// preTokenizerKeepsAll reports whether every byte of a section reaches
// some piece.
func preTokenizerKeepsAll(raw json.RawMessage) (bool, error) {
	if isNull(raw) {
		return true, nil
	}
	var c struct {
		component
		Pretokenizers []json.RawMessage `json:"pretokenizers"`
		Behavior      string            `json:"behavior"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, err
	}
	switch c.Type {
	case "Sequence":
		for _, p := range c.Pretokenizers {
			if ok, err := preTokenizerKeepsAll(p); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	case "Split":
		return !strings.EqualFold(c.Behavior, "removed"), nil
	case "ByteLevel", "Metaspace", "Digits":
		return true, nil
	}
	return false, nil // WhitespaceSplit drops the spaces
}

// Unicode normal forms and lowercasing shrink text by at most these
// factors (normalize_test.go checks every code point, and composition:
// three Hangul jamo, 9 bytes, make one syllable, 3 bytes).
const (
	unicodeFormShrink = 4 // NFKC: U+1D400 MATHEMATICAL BOLD CAPITAL A, 4 bytes, is "A"
	lowercaseShrink   = 3 // U+212A KELVIN SIGN, 3 bytes, is "k"
)

// normalizerShrink returns a factor s such that a normalized text is at
// least 1/s as long as its input, and whether it is at least as long as
// the input's ASCII bytes; ok false when no such bound exists.
func normalizerShrink(raw json.RawMessage) (s int, asciiKept, ok bool) {
	if isNull(raw) {
		return 1, true, true
	}
	var c struct {
		component
		Normalizers []json.RawMessage `json:"normalizers"`
		Pattern     pattern           `json:"pattern"`
		Content     string            `json:"content"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return 0, false, false
	}
	switch c.Type {
	case "Sequence":
		// Shrink factors multiply. The ASCII property holds for the
		// sequence when no step shrinks at all, or when the one step
		// that may shrink comes first and keeps ASCII (the steps after
		// it only lengthen).
		s, asciiKept = 1, true
		for i, n := range c.Normalizers {
			ns, na, nok := normalizerShrink(n)
			if !nok {
				return 0, false, false
			}
			if ns > 1 && (i > 0 || !na) {
				asciiKept = false
			}
			s *= ns
		}
		return s, asciiKept || s == 1, true
	case "NFC", "NFD", "NFKC", "NFKD":
		return unicodeFormShrink, true, true
	case "Lowercase":
		return lowercaseShrink, true, true
	case "Prepend":
		return 1, true, true
	case "Replace":
		if c.Pattern.String == nil || *c.Pattern.String == "" {
			return 0, false, false // a regex may delete anything
		}
		p := len(*c.Pattern.String)
		if len(c.Content) >= p {
			return 1, true, true
		}
		if c.Content == "" {
			return 0, false, false
		}
		return ceilDiv(p, len(c.Content)), false, true
	}
	return 0, false, false // Strip removes any number of spaces
}
