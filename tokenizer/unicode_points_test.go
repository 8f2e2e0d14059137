package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestUnicodePoints encodes 15,000 random code points (fixed seed), each
// alone, with the tokenizers whose pipeline reads Unicode data (qwen3's
// NFC normalizer, llama3_1's letter and number classes), and compares
// with the reference tokenizer (node's ICU, Unicode 17).
func TestUnicodePoints(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "golden", "unicode_points.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Generator string                `json:"generator"`
		Points    []rune                `json:"points"`
		IDs       map[string][][]uint32 `json:"ids"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"qwen3", "llama3_1"} {
		tok := golden(t, name)
		var bad []string
		for i, cp := range g.Points {
			if got := tok.Encode(string(cp), false); !slices.Equal(got, g.IDs[name][i]) {
				bad = append(bad, fmt.Sprintf("U+%04X", cp))
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s: %d of %d code points encode differently from %s: %v", name, len(bad), len(g.Points), g.Generator, bad)
		} else {
			t.Logf("%s: all %d code points encode as %s", name, len(g.Points), g.Generator)
		}
	}
}
