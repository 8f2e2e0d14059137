package tokenizer

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
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

// Random merge tables over the tokens a, aa, ..., a^12: any subset of
// the pairs (a^i, a^j), in any order. Most rank some pair before the
// merge that makes its operand, or list two pairs making one token, so
// passes give way and the tail holds the run's own pair: every branch
// of mergeRun against the queue.
func TestMergeRunRandomTables(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	const longest = 12
	vocab := map[string]int{}
	for i := 1; i <= longest; i++ {
		vocab[strings.Repeat("a", i)] = i - 1
	}
	vocabJSON, _ := json.Marshal(vocab)
	var pairs [][2]int
	for i := 1; i < longest; i++ {
		for j := 1; i+j <= longest; j++ {
			pairs = append(pairs, [2]int{i, j})
		}
	}
	for table := range 400 {
		rnd.Shuffle(len(pairs), func(a, b int) { pairs[a], pairs[b] = pairs[b], pairs[a] })
		var merges [][2]string
		for _, p := range pairs[:1+rnd.IntN(len(pairs))] {
			merges = append(merges, [2]string{strings.Repeat("a", p[0]), strings.Repeat("a", p[1])})
		}
		if table%2 == 0 { // (a, a) first, as trained tables have it
			merges = append([][2]string{{"a", "a"}}, merges...)
		}
		mergesJSON, _ := json.Marshal(merges)
		tj := fmt.Sprintf(`{"model":{"type":"BPE","vocab":%s,"merges":%s}}`, vocabJSON, mergesJSON)
		tok, err := FromJSON([]byte(tj), nil)
		if err != nil {
			t.Fatal(err)
		}
		for n := 2; n <= 200; n++ {
			checkRun(t, fmt.Sprintf("table %d %v", table, merges), tok.model, strings.Repeat("a", n))
		}
	}
}
