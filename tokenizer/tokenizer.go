// Package tokenizer turns text into the token ids an LLM engine computes
// for it, in pure Go, from a Hugging Face tokenizer.json (+
// tokenizer_config.json): byte-level BPE (GPT-2, Llama-3, Qwen2/3,
// DeepSeek-V3, gpt-oss), BPE with byte fallback over SentencePiece-style
// text (Llama-2, Mistral, Gemma: Metaspace or Prepend+Replace), and added
// tokens matched verbatim. It also renders chat templates (chat.go).
//
// Exactness is the point: a single token of difference moves every KV
// block hash after it, so the golden tests compare every id with the
// reference implementations (see testdata/gen).
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Tokenizer encodes text. It is safe for concurrent use.
type Tokenizer struct {
	model *bpe
	norm  normalizer
	pre   preTokenizer
	post  *postProcessor
	dec   decoder

	added   []addedToken
	addedID map[uint32]bool
	trie    trie
	tokens  []string // id → token (added tokens included)
	special map[uint32]bool

	// bound: how much input text a token covers at most; pieceBytes:
	// how many bytes of a pre-tokenized piece (limit.go; 0: no bound).
	bound      Bound
	pieceBytes int

	// Config is what tokenizer_config.json (and chat_template.jinja) say.
	Config Config
	// Path is where the tokenizer was loaded from.
	Path string
}

// Config is the part of tokenizer_config.json the router uses.
type Config struct {
	// ChatTemplate is the default chat template ("" = none);
	// ChatTemplates holds named ones ("tool_use", ...) when the config
	// lists several.
	ChatTemplate  string
	ChatTemplates map[string]string
	BOSToken      string
	EOSToken      string
	UnkToken      string
	PadToken      string
	// TokenizerClass is tokenizer_config.json's tokenizer_class.
	TokenizerClass string
}

type addedToken struct {
	ID      uint32 `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
	LStrip  bool   `json:"lstrip"`
	RStrip  bool   `json:"rstrip"`
}

// Load reads a tokenizer from a tokenizer.json file or from a model
// directory holding tokenizer.json, and tokenizer_config.json and
// chat_template.jinja when they are present next to it.
func Load(path string) (*Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	dir, file := path, filepath.Join(path, "tokenizer.json")
	if !st.IsDir() {
		dir, file = filepath.Dir(path), path
	}
	tj, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := FromJSON(tj, cj)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", file, err)
	}
	if tpl, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		t.Config.ChatTemplate = string(tpl)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t.Path = path
	return t, nil
}

// FromJSON builds a tokenizer from the contents of tokenizer.json and
// tokenizer_config.json (which may be empty).
func FromJSON(tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	initClasses()
	var f struct {
		AddedTokens   []addedToken    `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Decoder       json.RawMessage `json:"decoder"`
		Model         struct {
			Type                    string            `json:"type"`
			Vocab                   map[string]uint32 `json:"vocab"`
			Merges                  json.RawMessage   `json:"merges"`
			UnkToken                *string           `json:"unk_token"`
			FuseUnk                 bool              `json:"fuse_unk"`
			ByteFallback            bool              `json:"byte_fallback"`
			IgnoreMerges            bool              `json:"ignore_merges"`
			EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
			ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
			Dropout                 *float64          `json:"dropout"`
		} `json:"model"`
	}
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	m := &f.Model
	if m.Type != "BPE" && !(m.Type == "" && m.Merges != nil) {
		return nil, fmt.Errorf("model type %q is not supported (only BPE)", m.Type)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, errors.New("BPE end_of_word_suffix is not supported")
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, errors.New("BPE continuing_subword_prefix is not supported")
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, errors.New("BPE dropout is not supported (it is random)")
	}
	t := &Tokenizer{special: map[uint32]bool{}, addedID: map[uint32]bool{}}
	vocab := m.Vocab
	if vocab == nil {
		vocab = map[string]uint32{}
	}
	// Added tokens join the vocabulary (the reference resolves every
	// token string through one table).
	for _, a := range f.AddedTokens {
		vocab[a.Content] = a.ID
		t.addedID[a.ID] = true
		if a.Special {
			t.special[a.ID] = true
		}
	}
	t.added = f.AddedTokens
	maxID := uint32(0)
	for _, id := range vocab {
		maxID = max(maxID, id)
	}
	if maxID > 1<<24 {
		return nil, fmt.Errorf("vocabulary id %d is implausibly large", maxID)
	}
	t.tokens = make([]string, maxID+1)
	for tok, id := range vocab {
		t.tokens[id] = tok
	}
	for _, a := range f.AddedTokens {
		t.tokens[a.ID] = a.Content
	}
	t.trie.build(f.AddedTokens)

	model := &bpe{vocab: vocab, fuseUnk: m.FuseUnk, byteFallback: m.ByteFallback, ignoreMerges: m.IgnoreMerges, unk: -1}
	if m.UnkToken != nil {
		if id, ok := vocab[*m.UnkToken]; ok {
			model.unk = int32(id)
		}
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	model.merges = newPairTable(len(merges))
	for rank, p := range merges {
		a, okA := vocab[p[0]]
		b, okB := vocab[p[1]]
		c, okC := vocab[p[0]+p[1]]
		if okA && okB && okC {
			model.merges.put(pairKey(int32(a), int32(b)), merge{rank: uint32(rank), id: c})
		}
	}
	model.initRanks(len(merges))
	t.model = model

	if t.norm, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	var byteLevel bool
	if t.pre, byteLevel, err = buildPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := model.init(byteLevel); err != nil {
		return nil, err
	}
	t.deriveBound(f.Normalizer, f.PreTokenizer)
	if t.post, err = buildPostProcessor(f.PostProcessor, vocab); err != nil {
		return nil, err
	}
	if t.dec, err = buildDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(configJSON))) > 0 {
		if t.Config, err = parseConfig(configJSON); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// parseMerges reads merges as ["a b", ...] or [["a", "b"], ...].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var flat []string
	if err := json.Unmarshal(raw, &flat); err != nil {
		return nil, fmt.Errorf("parse merges: %w", err)
	}
	pairs = make([][2]string, 0, len(flat))
	for _, s := range flat {
		a, b, ok := strings.Cut(s, " ")
		if !ok {
			return nil, fmt.Errorf("merge %q: want two tokens separated by a space", s)
		}
		pairs = append(pairs, [2]string{a, b})
	}
	return pairs, nil
}

func parseConfig(raw []byte) (Config, error) {
	var c map[string]json.RawMessage
	if err := json.Unmarshal(raw, &c); err != nil {
		return Config{}, fmt.Errorf("parse tokenizer_config.json: %w", err)
	}
	var cfg Config
	token := func(k string) string {
		v, ok := c[k]
		if !ok {
			return ""
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
		var obj struct {
			Content string `json:"content"`
		}
		if json.Unmarshal(v, &obj) == nil {
			return obj.Content
		}
		return ""
	}
	cfg.BOSToken, cfg.EOSToken, cfg.UnkToken, cfg.PadToken = token("bos_token"), token("eos_token"), token("unk_token"), token("pad_token")
	cfg.TokenizerClass = token("tokenizer_class")
	if v, ok := c["chat_template"]; ok && !isNull(v) {
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			cfg.ChatTemplate = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(v, &named); err != nil {
				return Config{}, fmt.Errorf("tokenizer_config.json chat_template: want a string or a list of {name, template}")
			}
			cfg.ChatTemplates = map[string]string{}
			for _, n := range named {
				cfg.ChatTemplates[n.Name] = n.Template
			}
			cfg.ChatTemplate = cfg.ChatTemplates["default"]
		}
	}
	return cfg, nil
}

// Encode returns the token ids of text; addSpecial adds the model's
// special tokens (its post-processor's, e.g. a BOS), as an engine does
// for a completion prompt. A chat prompt rendered from a template already
// holds them: encode it with addSpecial false.
func (t *Tokenizer) Encode(text string, addSpecial bool) []uint32 {
	return t.AppendEncode(make([]uint32, 0, len(text)/3+4), text, addSpecial)
}

// AppendEncode is Encode appending to dst.
func (t *Tokenizer) AppendEncode(dst []uint32, text string, addSpecial bool) []uint32 {
	dst, _ = t.appendEncode(dst, text, addSpecial, 0)
	return dst
}

// appendEncode is AppendEncode that stops, returning false, as soon as
// the encoding is sure to exceed limit tokens (limit <= 0: no limit): when
// the ids so far pass it, or when the ids so far plus the fewest tokens
// the rest of a section or piece can make (pieceBytes) do.
func (t *Tokenizer) appendEncode(dst []uint32, text string, addSpecial bool, limit int) ([]uint32, bool) {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	e := &encoding{t: t, dst: dst, base: len(dst), limit: limit, ok: true}
	e.emitFn = e.emit
	if addSpecial && t.post != nil {
		e.dst = append(e.dst, t.post.prefix...)
		e.suffix = len(t.post.suffix)
	}
	t.sections(text, e.section)
	if e.ok && addSpecial && t.post != nil {
		e.dst = append(e.dst, t.post.suffix...)
	}
	return e.dst, e.ok
}

// encoding is the state of one appendEncode (one allocation for all of
// it, where closures took one per captured variable).
type encoding struct {
	t                   *Tokenizer
	dst                 []uint32
	base, suffix, limit int
	ok                  bool
	emitFn              func(string) bool // e.emit, made once
}

// over reports whether n more tokens than the ids so far cannot fit.
func (e *encoding) over(n int) bool {
	return e.limit > 0 && len(e.dst)-e.base+n+e.suffix > e.limit
}

// fewest is the fewest tokens a piece (or a section whose pre-tokenizer
// keeps every byte) of s can make.
func (e *encoding) fewest(s string) int {
	if e.t.pieceBytes == 0 {
		return 0
	}
	return ceilDiv(len(s), e.t.pieceBytes)
}

func (e *encoding) emit(p string) bool {
	if e.limit > 0 && e.over(e.fewest(p)) {
		e.ok = false
		return false
	}
	e.dst = e.t.model.encodePiece(e.dst, p)
	e.ok = !e.over(0)
	return e.ok
}

func (e *encoding) section(idx int, sec string, added int) bool {
	t := e.t
	if added >= 0 {
		e.dst = append(e.dst, t.added[added].ID)
		e.ok = !e.over(0)
		return e.ok
	}
	if t.norm != nil {
		sec = t.norm(sec)
	}
	if sec == "" {
		return true
	}
	if t.pre == nil {
		return e.emit(sec)
	}
	// A pre-tokenizer keeps every byte when pieceBytes is set.
	if e.limit > 0 && e.over(e.fewest(sec)) {
		e.ok = false
		return false
	}
	return t.pre(sec, idx == 0, e.emitFn)
}

// sections cuts text at added tokens (leftmost longest match, as the
// reference) and calls fn with each piece in order: an added token (its
// index in t.added) or the text between two of them (added = -1),
// until fn returns false. lstrip/rstrip added tokens eat the whitespace
// next to them.
func (t *Tokenizer) sections(text string, fn func(idx int, sec string, added int) bool) {
	if t.trie.empty() {
		fn(0, text, -1)
		return
	}
	type sec struct {
		s     string
		added int
	}
	var buf [16]sec
	secs := buf[:0]
	start := 0
	for i := 0; i < len(text); {
		if !t.trie.first[text[i]] {
			i++
			continue
		}
		tok, end := t.trie.longest(text, i)
		if tok < 0 {
			i++
			continue
		}
		if i > start {
			secs = append(secs, sec{text[start:i], -1})
		}
		secs = append(secs, sec{text[i:end], int(tok)})
		i, start = end, end
	}
	if start < len(text) {
		secs = append(secs, sec{text[start:], -1})
	}
	for k, s := range secs {
		if s.added < 0 {
			continue
		}
		a := t.added[s.added]
		if a.LStrip && k > 0 && secs[k-1].added < 0 {
			secs[k-1].s = strings.TrimRightFunc(secs[k-1].s, isJSSpace)
		}
		if a.RStrip && k+1 < len(secs) && secs[k+1].added < 0 {
			secs[k+1].s = strings.TrimLeftFunc(secs[k+1].s, isJSSpace)
		}
	}
	for k, s := range secs {
		if s.added < 0 && s.s == "" {
			continue
		}
		if !fn(k, s.s, s.added) {
			return
		}
	}
}

// Decode turns ids back into text; skipSpecial leaves out special
// tokens. Unknown ids are skipped.
func (t *Tokenizer) Decode(ids []uint32, skipSpecial bool) string {
	var out strings.Builder
	var run []string
	flush := func() {
		if len(run) == 0 {
			return
		}
		parts := run
		if t.dec != nil {
			parts = t.dec(run)
		}
		for _, p := range parts {
			out.WriteString(p)
		}
		run = run[:0]
	}
	for _, id := range ids {
		if int(id) >= len(t.tokens) {
			continue
		}
		if t.isAdded(id) {
			if skipSpecial && t.special[id] {
				continue
			}
			flush()
			out.WriteString(t.tokens[id])
			continue
		}
		run = append(run, t.tokens[id])
	}
	flush()
	return out.String()
}

func (t *Tokenizer) isAdded(id uint32) bool { return t.addedID[id] }

// VocabSize is one more than the largest token id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a token string (vocabulary or added token).
func (t *Tokenizer) TokenID(tok string) (uint32, bool) {
	id, ok := t.model.vocab[tok]
	return id, ok
}

// ---------- added-token trie ----------

type trie struct {
	nodes []trieNode
	first [256]bool
}

type trieNode struct {
	next map[byte]int32
	tok  int32 // index in added, -1 = none
}

func (tr *trie) empty() bool { return len(tr.nodes) <= 1 }

func (tr *trie) build(added []addedToken) {
	tr.nodes = []trieNode{{tok: -1}}
	for k, a := range added {
		if a.Content == "" {
			continue
		}
		tr.first[a.Content[0]] = true
		n := int32(0)
		for i := 0; i < len(a.Content); i++ {
			c := a.Content[i]
			nx, ok := tr.nodes[n].next[c]
			if !ok {
				nx = int32(len(tr.nodes))
				tr.nodes = append(tr.nodes, trieNode{tok: -1})
				if tr.nodes[n].next == nil {
					tr.nodes[n].next = map[byte]int32{}
				}
				tr.nodes[n].next[c] = nx
			}
			n = nx
		}
		tr.nodes[n].tok = int32(k)
	}
}

// longest returns the longest added token at s[i] and its end (-1 if
// none).
func (tr *trie) longest(s string, i int) (int32, int) {
	n, tok, end := int32(0), int32(-1), -1
	for j := i; j < len(s); j++ {
		nx, ok := tr.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = nx
		if tr.nodes[n].tok >= 0 {
			tok, end = tr.nodes[n].tok, j+1
		}
	}
	return tok, end
}
