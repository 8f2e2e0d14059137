package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// The pipeline stages of tokenizer.json, each built from its JSON: the
// normalizer rewrites a section of text, the pre-tokenizer cuts it into
// pieces, the model turns each piece into ids, the post-processor adds
// special tokens, and the decoder turns tokens back into text.

type component struct {
	Type string `json:"type"`
}

// pattern is tokenizer.json's {"String": "..."} or {"Regex": "..."}.
type pattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// ---------- normalizers ----------

type normalizer func(string) string

func buildNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c struct {
		component
		Normalizers []json.RawMessage `json:"normalizers"`
		Pattern     pattern           `json:"pattern"`
		Content     string            `json:"content"`
		Prepend     string            `json:"prepend"`
		Left        *bool             `json:"left"`
		Right       *bool             `json:"right"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		var list []normalizer
		for _, r := range c.Normalizers {
			n, err := buildNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				list = append(list, n)
			}
		}
		if len(list) == 0 {
			return nil, nil
		}
		return func(s string) string {
			for _, n := range list {
				s = n(s)
			}
			return s
		}, nil
	case "NFC":
		return nfc, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Lowercase":
		return strings.ToLower, nil
	case "Prepend":
		p := c.Prepend
		return func(s string) string {
			if s == "" {
				return s
			}
			return p + s
		}, nil
	case "Replace":
		return replacer(c.Pattern, c.Content)
	case "Strip":
		left, right := c.Left == nil || *c.Left, c.Right == nil || *c.Right
		return func(s string) string {
			if left {
				s = strings.TrimLeftFunc(s, isJSSpace)
			}
			if right {
				s = strings.TrimRightFunc(s, isJSSpace)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("normalizer %q is not supported", c.Type)
}

func replacer(p pattern, content string) (func(string) string, error) {
	switch {
	case p.String != nil:
		old := *p.String
		return func(s string) string { return strings.ReplaceAll(s, old, content) }, nil
	case p.Regex != nil:
		re, err := regexp2.Compile(*p.Regex, regexp2.Unicode)
		if err != nil {
			return nil, fmt.Errorf("replace pattern %q: %w", *p.Regex, err)
		}
		return func(s string) string {
			out, err := re.Replace(s, content, -1, -1)
			if err != nil {
				return s
			}
			return out
		}, nil
	}
	return nil, fmt.Errorf("replace: pattern has neither String nor Regex")
}

func isJSSpace(r rune) bool { initClasses(); return class(r)&clsSpace != 0 }

// ---------- pre-tokenizers ----------

// preTokenizer cuts one section of normalized text into pieces. first
// is true for the text's first section (Metaspace's prepend_scheme
// "first"). It stops, and returns false, as soon as emit returns false
// (the encoder's token limit is crossed).
type preTokenizer func(s string, first bool, emit func(string) bool) bool

// buildPreTokenizer returns the pre-tokenizer and whether the pieces it
// emits are byte-level (a ByteLevel pre-tokenizer ends the chain).
func buildPreTokenizer(raw json.RawMessage) (preTokenizer, bool, error) {
	if isNull(raw) {
		return nil, false, nil
	}
	var c struct {
		component
		Pretokenizers    []json.RawMessage `json:"pretokenizers"`
		Pattern          pattern           `json:"pattern"`
		Behavior         string            `json:"behavior"`
		Invert           bool              `json:"invert"`
		AddPrefixSpace   *bool             `json:"add_prefix_space"`
		UseRegex         *bool             `json:"use_regex"`
		Replacement      string            `json:"replacement"`
		PrependScheme    string            `json:"prepend_scheme"`
		Split            *bool             `json:"split"`
		IndividualDigits bool              `json:"individual_digits"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		var list []preTokenizer
		byteLevel := false
		for i, r := range c.Pretokenizers {
			p, bl, err := buildPreTokenizer(r)
			if err != nil {
				return nil, false, err
			}
			if bl && i != len(c.Pretokenizers)-1 {
				return nil, false, fmt.Errorf("pre_tokenizer: a ByteLevel step before the end of a Sequence is not supported")
			}
			byteLevel = byteLevel || bl
			if p != nil {
				list = append(list, p)
			}
		}
		return chain(list), byteLevel, nil
	case "Split":
		var sp splitter
		var err error
		switch {
		case c.Pattern.Regex != nil:
			sp, _, err = compilePattern(*c.Pattern.Regex)
		case c.Pattern.String != nil:
			sp = literalSplitter(*c.Pattern.String)
		default:
			err = fmt.Errorf("pre_tokenizer Split: pattern has neither String nor Regex")
		}
		if err != nil {
			return nil, false, err
		}
		if c.Pattern.Regex != nil {
			if m, ok := handWritten[*c.Pattern.Regex]; ok {
				if pre, ok := isolatedSplit(m, c.Behavior, c.Invert); ok {
					return pre, false, nil
				}
			}
		}
		return behave(sp, c.Behavior, c.Invert)
	case "ByteLevel":
		prefix := c.AddPrefixSpace != nil && *c.AddPrefixSpace
		useRegex := c.UseRegex == nil || *c.UseRegex
		if !prefix && !useRegex {
			return nil, true, nil
		}
		return func(s string, _ bool, emit func(string) bool) bool {
			if prefix && !strings.HasPrefix(s, " ") {
				s = " " + s
			}
			if !useRegex {
				return emit(s)
			}
			return splitWith(matchGPT2, s, func(p string, _ bool) bool { return emit(p) })
		}, true, nil
	case "Metaspace":
		rep := c.Replacement
		if rep == "" {
			rep = "\u2581"
		}
		scheme := c.PrependScheme
		if scheme == "" {
			scheme = "always"
			if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
				scheme = "never"
			}
		}
		split := c.Split == nil || *c.Split
		return func(s string, first bool, emit func(string) bool) bool {
			s = strings.ReplaceAll(s, " ", rep)
			if (scheme == "always" || scheme == "first" && first) && !strings.HasPrefix(s, rep) {
				s = rep + s
			}
			if !split {
				return emit(s)
			}
			// Each piece starts at a replacement character (MergedWithNext).
			start := 0
			for i := len(rep); i <= len(s)-len(rep); {
				j := strings.Index(s[i:], rep)
				if j < 0 {
					break
				}
				i += j
				if i > start && !emit(s[start:i]) {
					return false
				}
				start = i
				i += len(rep)
			}
			return start >= len(s) || emit(s[start:])
		}, false, nil
	case "Digits":
		individual := c.IndividualDigits
		return func(s string, _ bool, emit func(string) bool) bool {
			start := 0
			for i := 0; i < len(s); i++ {
				d := s[i] >= '0' && s[i] <= '9'
				if !d {
					continue
				}
				if start < i && !emit(s[start:i]) {
					return false
				}
				e := i + 1
				for !individual && e < len(s) && s[e] >= '0' && s[e] <= '9' {
					e++
				}
				if !emit(s[i:e]) {
					return false
				}
				start, i = e, e-1
			}
			return start >= len(s) || emit(s[start:])
		}, false, nil
	case "WhitespaceSplit":
		return func(s string, _ bool, emit func(string) bool) bool {
			for _, f := range strings.FieldsFunc(s, isJSSpace) {
				if !emit(f) {
					return false
				}
			}
			return true
		}, false, nil
	}
	return nil, false, fmt.Errorf("pre_tokenizer %q is not supported", c.Type)
}

func chain(list []preTokenizer) preTokenizer {
	switch len(list) {
	case 0:
		return nil
	case 1:
		return list[0]
	}
	// Each step's pieces go to the next step: the callbacks are made
	// once per call of the whole chain, not once per piece of a step.
	return func(s string, first bool, emit func(string) bool) bool {
		var buf [4]func(string) bool
		emits := buf[:0]
		if len(list) > len(buf) {
			emits = make([]func(string) bool, 0, len(list))
		}
		emits = emits[:len(list)]
		emits[len(list)-1] = emit
		for k := len(list) - 2; k >= 0; k-- {
			next, nextEmit := list[k+1], emits[k+1]
			emits[k] = func(p string) bool { return next(p, first, nextEmit) }
		}
		return list[0](s, first, emits[0])
	}
}

// literalSplitter splits on every occurrence of a fixed string.
func literalSplitter(lit string) splitter {
	return func(s string, emit func(string, bool) bool) bool {
		if lit == "" {
			return s == "" || emit(s, false)
		}
		for {
			i := strings.Index(s, lit)
			if i < 0 {
				break
			}
			if i > 0 && !emit(s[:i], false) {
				return false
			}
			if !emit(s[i:i+len(lit)], true) {
				return false
			}
			s = s[i+len(lit):]
		}
		return s == "" || emit(s, false)
	}
}

// behave applies a Split behavior (Hugging Face tokenizers' semantics)
// to the pieces of a splitter.
// isolatedSplit is behave's Isolated and Removed for a hand-written
// matcher, calling splitWith directly: its callback then lives on the
// stack, where behave's, passed to a splitter value, is allocated on
// every call (every piece of the step before: a digit, a word).
func isolatedSplit(m matcher, behavior string, invert bool) (preTokenizer, bool) {
	switch strings.ToLower(behavior) {
	case "isolated", "":
		return func(s string, _ bool, emit func(string) bool) bool {
			return splitWith(m, s, func(p string, _ bool) bool { return emit(p) })
		}, true
	case "removed":
		return func(s string, _ bool, emit func(string) bool) bool {
			return splitWith(m, s, func(p string, isMatch bool) bool { return isMatch != invert || emit(p) })
		}, true
	}
	return nil, false
}

func behave(sp splitter, behavior string, invert bool) (preTokenizer, bool, error) {
	switch strings.ToLower(behavior) {
	case "isolated", "":
		return func(s string, _ bool, emit func(string) bool) bool {
			return sp(s, func(p string, _ bool) bool { return emit(p) })
		}, false, nil
	case "removed":
		return func(s string, _ bool, emit func(string) bool) bool {
			return sp(s, func(p string, m bool) bool { return m != invert || emit(p) })
		}, false, nil
	case "mergedwithprevious", "mergedwithnext", "contiguous":
	default:
		return nil, false, fmt.Errorf("pre_tokenizer Split: behavior %q is not supported", behavior)
	}
	b := strings.ToLower(behavior)
	return func(s string, _ bool, emit func(string) bool) bool {
		// Pieces are contiguous: merging is extending a byte range.
		off, ps, pe := 0, -1, -1 // pending piece [ps, pe)
		pendingMatch, prevMatch := false, false
		ok := true // emit has not asked to stop
		flush := func() {
			if ps >= 0 && pe > ps && ok {
				ok = emit(s[ps:pe])
			}
			ps, pe = -1, -1
		}
		sp(s, func(p string, m bool) bool {
			m = m != invert
			start, end := off, off+len(p)
			off = end
			switch b {
			case "mergedwithprevious":
				// A match joins the piece before it, unless that piece
				// is a match itself.
				if m && ps >= 0 && !prevMatch {
					pe = end
					prevMatch = true
					return ok
				}
				flush()
				ps, pe, prevMatch = start, end, m
			case "mergedwithnext":
				// A match joins the piece after it, unless that piece is
				// a match itself.
				if m {
					flush()
					ps, pe, pendingMatch = start, end, true
					return ok
				}
				if ps >= 0 && pendingMatch {
					pe = end
					flush()
					pendingMatch = false
					return ok
				}
				flush()
				if ok {
					ok = emit(p)
				}
			case "contiguous":
				if m && ps >= 0 && pendingMatch {
					pe = end
					return ok
				}
				flush()
				ps, pe, pendingMatch = start, end, m
			}
			return ok
		})
		flush()
		return ok
	}, false, nil
}

// ---------- post-processors ----------

// postProcessor adds a model's special tokens around an encoding.
type postProcessor struct {
	prefix, suffix []uint32
}

func (p *postProcessor) apply(ids []uint32) []uint32 {
	if p == nil || len(p.prefix)+len(p.suffix) == 0 {
		return ids
	}
	out := make([]uint32, 0, len(p.prefix)+len(ids)+len(p.suffix))
	out = append(out, p.prefix...)
	out = append(out, ids...)
	return append(out, p.suffix...)
}

func buildPostProcessor(raw json.RawMessage, vocab map[string]uint32) (*postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c struct {
		component
		Processors    []json.RawMessage `json:"processors"`
		Single        []json.RawMessage `json:"single"`
		SpecialTokens map[string]struct {
			IDs []uint32 `json:"ids"`
		} `json:"special_tokens"`
		Cls []json.RawMessage `json:"cls"`
		Sep []json.RawMessage `json:"sep"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	special := func(name string) ([]uint32, error) {
		if st, ok := c.SpecialTokens[name]; ok && len(st.IDs) > 0 {
			return st.IDs, nil
		}
		if id, ok := vocab[name]; ok {
			return []uint32{id}, nil
		}
		return nil, fmt.Errorf("post_processor: special token %q is not in the vocabulary", name)
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil
	case "Sequence":
		out := &postProcessor{}
		for _, r := range c.Processors {
			p, err := buildPostProcessor(r, vocab)
			if err != nil {
				return nil, err
			}
			if p != nil {
				out.prefix = append(out.prefix, p.prefix...)
				out.suffix = append(p.suffix, out.suffix...)
			}
		}
		return out, nil
	case "TemplateProcessing":
		out := &postProcessor{}
		seen := false
		for _, item := range c.Single {
			var it struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			}
			if err := json.Unmarshal(item, &it); err != nil {
				return nil, fmt.Errorf("post_processor: %w", err)
			}
			switch {
			case it.Sequence != nil:
				seen = true
			case it.SpecialToken != nil:
				ids, err := special(it.SpecialToken.ID)
				if err != nil {
					return nil, err
				}
				if seen {
					out.suffix = append(out.suffix, ids...)
				} else {
					out.prefix = append(out.prefix, ids...)
				}
			}
		}
		return out, nil
	case "BertProcessing", "RobertaProcessing":
		if len(c.Cls) != 2 || len(c.Sep) != 2 {
			return nil, fmt.Errorf("post_processor %s: want cls and sep as [token, id]", c.Type)
		}
		var clsID, sepID uint32
		if err := json.Unmarshal(c.Cls[1], &clsID); err != nil {
			return nil, fmt.Errorf("post_processor %s: %w", c.Type, err)
		}
		if err := json.Unmarshal(c.Sep[1], &sepID); err != nil {
			return nil, fmt.Errorf("post_processor %s: %w", c.Type, err)
		}
		return &postProcessor{prefix: []uint32{clsID}, suffix: []uint32{sepID}}, nil
	}
	return nil, fmt.Errorf("post_processor %q is not supported", c.Type)
}

// ---------- decoders ----------

// decoder turns the tokens of an encoding back into text pieces.
type decoder func(tokens []string) []string

func buildDecoder(raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c struct {
		component
		Decoders      []json.RawMessage `json:"decoders"`
		Pattern       pattern           `json:"pattern"`
		Content       string            `json:"content"`
		Start         int               `json:"start"`
		Stop          int               `json:"stop"`
		Replacement   string            `json:"replacement"`
		PrependScheme string            `json:"prepend_scheme"`
		AddPrefix     *bool             `json:"add_prefix_space"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	switch c.Type {
	case "Sequence":
		var list []decoder
		for _, r := range c.Decoders {
			d, err := buildDecoder(r)
			if err != nil {
				return nil, err
			}
			if d != nil {
				list = append(list, d)
			}
		}
		return func(t []string) []string {
			for _, d := range list {
				t = d(t)
			}
			return t
		}, nil
	case "ByteLevel":
		return func(t []string) []string {
			var b []byte
			for _, tok := range t {
				for _, r := range tok {
					if c, ok := charBytes[r]; ok {
						b = append(b, c)
					} else {
						b = utf8.AppendRune(b, r)
					}
				}
			}
			return []string{string(b)}
		}, nil
	case "Replace":
		rep, err := replacer(c.Pattern, c.Content)
		if err != nil {
			return nil, err
		}
		return func(t []string) []string {
			out := make([]string, len(t))
			for i, s := range t {
				out[i] = rep(s)
			}
			return out
		}, nil
	case "ByteFallback":
		return func(t []string) []string {
			var out []string
			var pending []byte
			flush := func() {
				if len(pending) == 0 {
					return
				}
				if utf8.Valid(pending) {
					out = append(out, string(pending))
				} else {
					for range pending {
						out = append(out, "\uFFFD")
					}
				}
				pending = pending[:0]
			}
			for _, s := range t {
				var v byte
				if len(s) == 6 && strings.HasPrefix(s, "<0x") && s[5] == '>' {
					if _, err := fmt.Sscanf(s[3:5], "%02X", &v); err == nil {
						pending = append(pending, v)
						continue
					}
				}
				flush()
				out = append(out, s)
			}
			flush()
			return out
		}, nil
	case "Fuse":
		return func(t []string) []string { return []string{strings.Join(t, "")} }, nil
	case "Strip":
		content, start, stop := c.Content, c.Start, c.Stop
		return func(t []string) []string {
			out := make([]string, len(t))
			for i, s := range t {
				for k := 0; k < start && strings.HasPrefix(s, content); k++ {
					s = s[len(content):]
				}
				for k := 0; k < stop && strings.HasSuffix(s, content); k++ {
					s = s[:len(s)-len(content)]
				}
				out[i] = s
			}
			return out
		}, nil
	case "Metaspace":
		rep := c.Replacement
		if rep == "" {
			rep = "\u2581"
		}
		strip := c.PrependScheme != "never" && (c.AddPrefix == nil || *c.AddPrefix)
		return func(t []string) []string {
			out := make([]string, len(t))
			for i, s := range t {
				s = strings.ReplaceAll(s, rep, " ")
				if strip && i == 0 {
					s = strings.TrimPrefix(s, " ")
				}
				out[i] = s
			}
			return out
		}, nil
	}
	return nil, fmt.Errorf("decoder %q is not supported", c.Type)
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}
