package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The reference's algorithm for long words, kept here as the oracle of
// FuzzMergeByRank: a priority queue of (rank, position) candidates over a
// linked list of symbols.

// mergeLarge merges a word with a priority queue over a linked list.
func (m *bpe) mergeLarge(syms []symbol) []symbol {
	n := len(syms)
	next := make([]int32, n)
	prev := make([]int32, n)
	alive := make([]bool, n)
	for i := range syms {
		next[i], prev[i], alive[i] = int32(i+1), int32(i-1), true
	}
	next[n-1] = -1
	q := make(mergeQueue, 0, n)
	push := func(i int32) {
		j := next[i]
		if j < 0 {
			return
		}
		mg := m.lookup(syms[i].id, syms[j].id)
		if mg.rank == noRank {
			return
		}
		q.push(candidate{rank: mg.rank, pos: i, left: syms[i].id, right: syms[j].id, id: mg.id})
	}
	for i := int32(0); i < int32(n-1); i++ {
		push(i)
	}
	for len(q) > 0 {
		c := q.pop()
		i := c.pos
		if !alive[i] || syms[i].id != c.left {
			continue
		}
		j := next[i]
		if j < 0 || syms[j].id != c.right {
			continue
		}
		syms[i].id = int32(c.id)
		syms[i].end = syms[j].end
		alive[j] = false
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		if p := prev[i]; p >= 0 {
			push(p)
		}
		push(i)
	}
	out := syms[:0]
	for i := int32(0); i >= 0 && int(i) < n; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

type candidate struct {
	rank        uint32
	pos         int32
	left, right int32
	id          uint32
}

// mergeQueue is a binary min-heap of candidates by (rank, position).
type mergeQueue []candidate

func (c candidate) less(d candidate) bool {
	return c.rank < d.rank || c.rank == d.rank && c.pos < d.pos
}

func (q *mergeQueue) push(c candidate) {
	h := append(*q, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	*q = h
}

func (q *mergeQueue) pop() candidate {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h[l].less(h[m]) {
			m = l
		}
		if r < n && h[r].less(h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

// mergeByRank gives the queue's symbols on any word: Qwen3 (a merge
// table where every pair ranks after the merges producing it) and
// Llama-3.1 (one where some do not, which makes a pass give way).
// TestMergeByRankMatchesQueue covers every golden tokenizer.
func FuzzMergeByRank(f *testing.F) {
	for _, s := range []string{"aaaaaaaa", "    \n\n  ", "1234567890", "hello world the cat", "你好世界", "ab ab ab aba"} {
		f.Add(s, uint8(200))
	}
	names := []string{"qwen3", "llama3_1"}
	toks := []*Tokenizer{golden(f, names[0]), golden(f, names[1])}
	f.Fuzz(func(t *testing.T, unit string, reps uint8) {
		if unit == "" {
			return
		}
		word := strings.Repeat(unit, 1+int(reps)*64/len(unit)+1)
		if len(word) > 1<<14 {
			word = word[:1<<14]
		}
		for k, tok := range toks {
			m := tok.model
			syms := m.appendSymbols(nil, word)
			if len(syms) < 2 {
				continue
			}
			a := m.mergeByRank(append([]symbol(nil), syms...))
			b := m.mergeLarge(append([]symbol(nil), syms...))
			if len(a) != len(b) {
				t.Fatalf("%s on %q: mergeByRank %d symbols, queue %d", names[k], word, len(a), len(b))
			}
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("%s on %q: symbol %d differs: %+v vs %+v", names[k], word, i, a[i], b[i])
				}
			}
		}
	})
}

// Seeded random words, for every golden tokenizer: runs of a repeated
// unit, mixes of a few units (what makes rank passes give way to lower
// ranks), random text from the split alphabet.
func TestMergeByRankMatchesQueue(t *testing.T) {
	units := []string{"a", "aa", "ab", "aab", " ", "  \n", "7", "12", "=", "-=", "é", "好", "🙂", "\u3000", "the", "▁", "x ", "ー"}
	rnd := rand.New(rand.NewPCG(1, 2))
	var words []string
	for range 300 {
		var sb strings.Builder
		switch rnd.IntN(3) {
		case 0:
			u := units[rnd.IntN(len(units))]
			sb.WriteString(strings.Repeat(u, 130+rnd.IntN(2000)/len(u)))
		case 1:
			a, b := units[rnd.IntN(len(units))], units[rnd.IntN(len(units))]
			for sb.Len() < 130+rnd.IntN(2000) {
				if rnd.IntN(4) == 0 {
					sb.WriteString(b)
				} else {
					sb.WriteString(a)
				}
			}
		default:
			for sb.Len() < 130+rnd.IntN(1000) {
				sb.WriteRune(splitAlphabet[rnd.IntN(len(splitAlphabet))])
			}
		}
		words = append(words, sb.String())
	}
	for _, name := range goldenModels {
		m := golden(t, name).model
		for _, w := range words {
			syms := m.appendSymbols(nil, w)
			a := m.mergeByRank(append([]symbol(nil), syms...))
			b := m.mergeLarge(append([]symbol(nil), syms...))
			if !slices.Equal(a, b) {
				t.Fatalf("%s on %q: mergeByRank %d symbols, the queue %d", name, w, len(a), len(b))
			}
		}
	}
}
