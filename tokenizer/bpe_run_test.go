package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// runUnits are the repeated symbols the run tests try: letters, spaces
// and other whitespace, digits, punctuation, multi-byte characters (one
// symbol for SentencePiece-style models, several bytes for byte-level
// ones, which then are not a run) and SentencePiece's ▁.
var runUnits = []string{"a", "z", "Q", " ", "\n", "\t", "7", "0", "=", "-", "*", ".", "!", "é", "好", "🙂", "▁", "\u3000", "\x00", "\xff"}

// checkRun compares mergeRun with the reference's queue on one piece.
func checkRun(t *testing.T, name string, m *bpe, piece string) {
	t.Helper()
	sc := m.rankPool.Get().(*rankScratch)
	defer m.rankPool.Put(sc)
	got, ok := m.mergeRun(sc, piece)
	if !ok {
		return
	}
	got = slices.Clone(got)
	want := m.mergeLarge(m.appendSymbols(nil, piece))
	if !slices.Equal(got, want) {
		t.Fatalf("%s on %d × %q: mergeRun %d symbols, the queue %d", name, len(piece), piece[:1], len(got), len(want))
	}
}

// A run of every length up to 400 and a few long ones, for every golden
// tokenizer (Llama-3.1's table has pairs ranked before the merges that
// make their operands, so some of its passes give way to mergeWith).
func TestMergeRunMatchesQueue(t *testing.T) {
	lengths := []int{1000, 1023, 1024, 4097, 20011}
	for n := 2; n <= 400; n++ {
		lengths = append(lengths, n)
	}
	for _, name := range goldenModels {
		m := golden(t, name).model
		runs := 0
		for _, u := range runUnits {
			if _, ok := m.runUnit(u + u); !ok {
				continue
			}
			runs++
			for _, n := range lengths {
				checkRun(t, name, m, strings.Repeat(u, n))
			}
		}
		if runs < 10 {
			t.Fatalf("%s: only %d units are runs", name, runs)
		}
	}
}

// Encode of a long run goes through mergeRun and gives the ids of the
// general merge.
func TestEncodeRunMatchesGeneralMerge(t *testing.T) {
	for _, name := range goldenModels {
		m := golden(t, name).model
		for _, u := range []string{"a", " ", "7", "▁"} {
			for _, n := range []int{129, 1000, 12345} {
				piece := strings.Repeat(u, n)
				got := m.encodeLong(nil, piece)
				want := m.appendIDs(nil, piece, m.mergeLarge(m.appendSymbols(nil, piece)))
				if !slices.Equal(got, want) {
					t.Fatalf("%s on %d × %q: %v, want %v", name, n, u, got, want)
				}
			}
		}
	}
}

func FuzzMergeRun(f *testing.F) {
	for _, u := range runUnits {
		f.Add(u, uint16(300))
	}
	names := []string{"qwen3", "llama3_1", "gemma3"}
	var models []*bpe
	for _, n := range names {
		models = append(models, golden(f, n).model)
	}
	f.Fuzz(func(t *testing.T, unit string, n uint16) {
		if unit == "" || len(unit) > 8 {
			return
		}
		piece := strings.Repeat(unit, int(n)%5000+2)
		for k, m := range models {
			checkRun(t, names[k], m, piece)
		}
	})
}
