package httpapi

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// Models are the models the router serves: each name has a tokenizer
// (and chat template), so text and chat prompts can be tokenized exactly
// as the engine does; a LoRA adapter name uses its base model's tokenizer
// and salts the block hashes with its name (Dynamo's LoRA salt).
type Models struct {
	byName  map[string]*servedModel
	names   []string // sorted
	single  *servedModel
	created int64
	// Engine, when set, tokenizes through a worker's POST /tokenize
	// instead of in process (--tokenizer-mode engine).
	Engine *EngineTokenizer
	// fallback tokenizes the models the parity tracker switched to
	// engine tokenization (when Engine is nil).
	fallback *EngineTokenizer
}

type servedModel struct {
	name string
	tok  *tokenizer.Tokenizer
	base string // LoRA adapter: the base model's name
	lora string // LoRA adapter: its name (the hash salt)
	// dialect is the engine whose chat preprocessing renders its chats.
	dialect tokenizer.Dialect
}

// ModelSpec is what the flags say: --served-model NAME=PATH (or NAME,
// with --tokenizer's path), --tokenizer PATH, --served-lora ADAPTER=MODEL.
type ModelSpec struct {
	Served    []string
	Tokenizer string
	LoRAs     []string
	// Engine: tokenize through the workers (--tokenizer-mode engine); a
	// served model then needs no tokenizer path.
	Engine bool
	// ChatEngines: --chat-engine MODEL=vllm|sglang, the engine whose chat
	// preprocessing a model's chats get (vllm when not named).
	ChatEngines []string
}

// Empty reports whether no model is configured.
func (s ModelSpec) Empty() bool { return len(s.Served) == 0 && s.Tokenizer == "" && len(s.LoRAs) == 0 }

// modelNameOf names a model served from --tokenizer alone: its
// directory's name (or the file's name without .json).
func modelNameOf(path string) string {
	p := filepath.Clean(path)
	base := filepath.Base(p)
	if strings.HasSuffix(base, ".json") {
		base = filepath.Base(filepath.Dir(p))
	}
	return base
}

// LoadModels loads every tokenizer of a spec (each path once).
func LoadModels(spec ModelSpec) (*Models, error) {
	m := &Models{byName: map[string]*servedModel{}, created: time.Now().Unix()}
	cache := map[string]*tokenizer.Tokenizer{}
	load := func(path string) (*tokenizer.Tokenizer, error) {
		if t, ok := cache[path]; ok {
			return t, nil
		}
		t, err := tokenizer.Load(path)
		if err != nil {
			return nil, err
		}
		cache[path] = t
		return t, nil
	}
	served := spec.Served
	if len(served) == 0 && spec.Tokenizer != "" {
		served = []string{modelNameOf(spec.Tokenizer)}
	}
	for _, s := range served {
		name, path, hasPath := strings.Cut(s, "=")
		name, path = strings.TrimSpace(name), strings.TrimSpace(path)
		if !hasPath {
			path = spec.Tokenizer
		}
		if name == "" || (path == "" && !spec.Engine) {
			return nil, fmt.Errorf("served model %q: want NAME=PATH (or NAME with --tokenizer PATH)", s)
		}
		if _, dup := m.byName[name]; dup {
			return nil, fmt.Errorf("served model %q is given twice", name)
		}
		var t *tokenizer.Tokenizer
		if path != "" {
			var err error
			if t, err = load(path); err != nil {
				return nil, fmt.Errorf("served model %q: %w", name, err)
			}
		}
		m.byName[name] = &servedModel{name: name, tok: t}
	}
	for _, s := range spec.LoRAs {
		name, base, ok := strings.Cut(s, "=")
		name, base = strings.TrimSpace(name), strings.TrimSpace(base)
		if !ok || name == "" || base == "" {
			return nil, fmt.Errorf("served LoRA %q: want ADAPTER=MODEL", s)
		}
		b, ok := m.byName[base]
		if !ok || b.base != "" {
			return nil, fmt.Errorf("served LoRA %q: base model %q is not a served model", name, base)
		}
		if _, dup := m.byName[name]; dup {
			return nil, fmt.Errorf("served LoRA %q: the name is already served", name)
		}
		m.byName[name] = &servedModel{name: name, tok: b.tok, base: base, lora: name}
	}
	for _, s := range spec.ChatEngines {
		name, engine, _ := strings.Cut(s, "=")
		name = strings.TrimSpace(name)
		sm, ok := m.byName[name]
		if !ok || sm.base != "" {
			return nil, fmt.Errorf("chat engine %q: %q is not a served model", s, name)
		}
		d, err := tokenizer.ParseDialect(engine)
		if err != nil {
			return nil, fmt.Errorf("chat engine %q: %w", s, err)
		}
		sm.dialect = d
	}
	for _, sm := range m.byName {
		if sm.base != "" {
			sm.dialect = m.byName[sm.base].dialect // an adapter is served by its base's engine
		}
	}
	for n := range m.byName {
		m.names = append(m.names, n)
	}
	sort.Strings(m.names)
	var bases []*servedModel
	for _, n := range m.names {
		if m.byName[n].base == "" {
			bases = append(bases, m.byName[n])
		}
	}
	if len(bases) == 1 {
		m.single = bases[0]
	}
	if spec.Engine {
		m.Engine = &EngineTokenizer{}
	} else {
		m.fallback = &EngineTokenizer{}
	}
	return m, nil
}

// Names lists the served model names (adapters included), sorted.
func (m *Models) Names() []string {
	if m == nil {
		return nil
	}
	return m.names
}

// unknownModelError is a request naming a model the router does not
// serve (HTTP 404, with the served names).
type unknownModelError struct {
	model  string
	served []string
}

func (e *unknownModelError) Error() string {
	if e.model == "" {
		return fmt.Sprintf("model is required: this router serves %s", strings.Join(e.served, ", "))
	}
	return fmt.Sprintf("model %q is not served here; served models: %s", e.model, strings.Join(e.served, ", "))
}

// resolve finds a request's model. With one base model served, a request
// without "model" uses it.
func (m *Models) resolve(name string) (*servedModel, error) {
	if m == nil || len(m.byName) == 0 {
		return nil, errNoTokenizer
	}
	if name == "" {
		if m.single != nil {
			return m.single, nil
		}
		return nil, &unknownModelError{served: m.names}
	}
	if sm, ok := m.byName[name]; ok {
		return sm, nil
	}
	return nil, &unknownModelError{model: name, served: m.names}
}
