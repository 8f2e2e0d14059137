package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// normalizationGap is where golang.org/x/text's normalization tables
// (Unicode 15.0 under Go 1.26: its Unicode 17 tables build only with Go
// 1.27) and the reference's (node's ICU, Unicode 17) part: the 103
// characters added in Unicode 16 and 17 that have a decomposition or a
// combining class. docs/chat-rendering.md lists them.
var normalizationGap = [][2]rune{
	{0x0897, 0x0897}, {0x1ACF, 0x1ADD}, {0x1AE0, 0x1AEB}, {0xA7F1, 0xA7F1}, {0x105C9, 0x105C9},
	{0x105E4, 0x105E4}, {0x10D69, 0x10D6D}, {0x10EFA, 0x10EFB}, {0x11383, 0x11383}, {0x11385, 0x11385},
	{0x1138E, 0x1138E}, {0x11391, 0x11391}, {0x113C5, 0x113C5}, {0x113C7, 0x113C8}, {0x113CE, 0x113D0},
	{0x16121, 0x16128}, {0x1612F, 0x1612F}, {0x16D68, 0x16D6A}, {0x1CCD6, 0x1CCF9}, {0x1E5EE, 0x1E5EF},
	{0x1E6E3, 0x1E6E3}, {0x1E6E6, 0x1E6E6}, {0x1E6EE, 0x1E6EF}, {0x1E6F5, 0x1E6F5},
}

// inGap reports whether r is in the gap of the tables this binary was
// built with: under Go 1.27 golang.org/x/text uses its Unicode 17 tables
// and there is none.
func inGap(r rune) bool {
	if norm.Version != "15.0.0" {
		return false
	}
	for _, g := range normalizationGap {
		if r >= g[0] && r <= g[1] {
			return true
		}
	}
	return false
}

// TestNormalizationTables compares, for every code point, its NFD, its
// NFKD and its combining class (seen through reordering) with the
// reference's: they must agree everywhere but normalizationGap, and
// differ at every code point of it; with Go 1.27 (GOTOOLCHAIN=go1.27.3,
// Unicode 17 tables) they must agree everywhere.
func TestNormalizationTables(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "golden", "normalization.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Generator string  `json:"generator"`
		Rows      [][]any `json:"rows"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	type forms struct{ d, kd, r string }
	ref := map[rune]forms{}
	for _, row := range g.Rows {
		ref[rune(row[0].(float64))] = forms{row[1].(string), row[2].(string), row[3].(string)}
	}
	var differ, unexpected []string
	gapSize := 0
	for r := rune(0); r <= 0x10FFFF; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		s := string(r)
		want, ok := ref[r]
		if !ok {
			want = forms{s, s, s + "\u0334"}
		}
		got := forms{norm.NFD.String(s), norm.NFKD.String(s), norm.NFD.String(s + "\u0334")}
		gap := inGap(r)
		if gap {
			gapSize++
		}
		switch {
		case got != want && !gap:
			unexpected = append(unexpected, fmt.Sprintf("U+%04X", r))
		case got == want && gap:
			differ = append(differ, fmt.Sprintf("U+%04X", r))
		}
	}
	if len(unexpected) > 0 {
		t.Errorf("golang.org/x/text %s and %s differ outside the documented gap at %d code points: %s", norm.Version, g.Generator, len(unexpected), strings.Join(unexpected, " "))
	}
	if len(differ) > 0 {
		t.Errorf("golang.org/x/text %s now agrees with %s at %d code points of the documented gap (update normalizationGap and docs/chat-rendering.md): %s", norm.Version, g.Generator, len(differ), strings.Join(differ, " "))
	}
	t.Logf("golang.org/x/text %s agrees with %s on every code point but the %d of the documented gap", norm.Version, g.Generator, gapSize)
}
