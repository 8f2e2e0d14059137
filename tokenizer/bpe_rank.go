package tokenizer

import (
	"slices"
	"sync"
)

// Merging a long word rank by rank.
//
// The reference merges a word with a priority queue of (rank, position)
// candidates: O(n log n), but on a word of a million symbols (one
// character repeated, a run of spaces) every pop walks a heap far larger
// than the CPU caches, and that cost a microsecond per byte of text.
//
// mergeByRank pops the same candidates in the same order with far less
// work: one bucket of positions per pending rank, and a small heap of the
// pending ranks. A rank's candidates are applied in one left-to-right pass
// over its bucket (sorted by position), which is the queue's order within
// one rank: a merge never creates a pair of its own rank (the merged
// token differs from both operands), so the bucket cannot grow during its
// pass. A merge that creates a pair ranked *lower* than the pass's rank
// (a merge table where a pair ranks before a merge producing one of its
// operands: trained tables have none, but some files do) would be popped
// next by the queue: the pass stops there, puts its rank back with the
// positions it has not reached, and the lower rank goes first. Every
// candidate is validated against the symbols it was made from, as the
// queue's are, so stale ones are skipped the same way.

// rankBucket holds the positions of one rank's pair.
type rankBucket struct {
	left, right int32
	id          uint32
	pos         []int32
	unsorted    bool // an append went below the last position
}

// rankScratch is mergeByRank's working memory, kept between calls.
type rankScratch struct {
	slot    []int32 // rank → index in buckets (-1: none pending)
	buckets []rankBucket
	heap    []uint32 // pending ranks (min-heap)
	// the word's symbols and their linked list
	syms       []symbol
	next, prev []int32
}

// initRanks prepares mergeByRank's scratch pool (nRanks: how many
// merges the file lists).
func (m *bpe) initRanks(nRanks int) {
	m.rankPool = &sync.Pool{New: func() any {
		sc := &rankScratch{slot: make([]int32, nRanks)}
		for i := range sc.slot {
			sc.slot[i] = -1
		}
		return sc
	}}
}

// maxKeptSymbols bounds the symbol buffer a scratch keeps between words
// (12 bytes a symbol).
const maxKeptSymbols = 1 << 20

// encodeLong appends the ids of a long piece, its symbols in pooled
// memory: a megabyte of one character is twelve of symbols.
func (m *bpe) encodeLong(dst []uint32, piece string) []uint32 {
	sc := m.rankPool.Get().(*rankScratch)
	defer m.rankPool.Put(sc)
	if syms, ok := m.mergeRun(sc, piece); ok {
		return m.appendIDs(dst, piece, syms)
	}
	syms := sc.syms[:0]
	if cap(syms) < len(piece) { // a symbol takes a byte at least
		syms = make([]symbol, 0, len(piece))
		if len(piece) <= maxKeptSymbols {
			sc.syms = syms
		}
	}
	syms = m.appendSymbols(syms, piece)
	return m.appendIDs(dst, piece, m.mergeWith(sc, syms))
}

// mergeByRank merges a long word; see above.
func (m *bpe) mergeByRank(syms []symbol) []symbol {
	sc := m.rankPool.Get().(*rankScratch)
	defer m.rankPool.Put(sc)
	return m.mergeWith(sc, syms)
}

// mergeWith is mergeByRank with its scratch.
func (m *bpe) mergeWith(sc *rankScratch, syms []symbol) []symbol {
	sc.buckets, sc.heap = sc.buckets[:0], sc.heap[:0]

	n := len(syms)
	next, prev := sc.next, sc.prev
	if cap(next) < n {
		next, prev = make([]int32, n), make([]int32, n)
		if n <= maxKeptSymbols {
			sc.next, sc.prev = next, prev
		}
	}
	// prev[i] is -2 once symbol i is merged into the one before it.
	next, prev = next[:n], prev[:n]
	for i := range syms {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	next[n-1] = -1

	cur, lower := uint32(noRank), false // the rank of the pass; a lower one was pushed
	// The last two pairs looked up: a long run repeats one pair, and a
	// pass over it alternates two (left of a merge, right of it).
	lastKey, lastMerge := emptyPair, merge{rank: noRank}
	prevKey, prevMerge := emptyPair, merge{rank: noRank}
	// find returns the merge of the pair at i (ok false: none).
	find := func(i int32) (merge, bool) {
		j := next[i]
		if j < 0 {
			return merge{}, false
		}
		a, c := syms[i].id, syms[j].id
		if a < 0 || c < 0 {
			return merge{}, false
		}
		key := pairKey(a, c)
		switch key {
		case lastKey:
		case prevKey:
			lastKey, lastMerge, prevKey, prevMerge = prevKey, prevMerge, lastKey, lastMerge
		default:
			mg, ok := m.merges.get(key)
			if !ok {
				mg.rank = noRank
			}
			lastKey, lastMerge, prevKey, prevMerge = key, mg, lastKey, lastMerge
		}
		return lastMerge, lastMerge.rank != noRank
	}
	// add files the pair at i under its merge's rank.
	add := func(i int32, mg merge) {
		lower = lower || mg.rank < cur
		b := sc.slot[mg.rank]
		if b < 0 {
			b = int32(len(sc.buckets))
			left, right := syms[i].id, syms[next[i]].id
			if len(sc.buckets) < cap(sc.buckets) {
				sc.buckets = sc.buckets[:b+1]
				old := sc.buckets[b].pos[:0]
				sc.buckets[b] = rankBucket{left: left, right: right, id: mg.id, pos: old}
			} else {
				sc.buckets = append(sc.buckets, rankBucket{left: left, right: right, id: mg.id})
			}
			sc.slot[mg.rank] = b
			sc.pushRank(mg.rank)
		}
		bk := &sc.buckets[b]
		if len(bk.pos) > 0 && bk.pos[len(bk.pos)-1] > i {
			bk.unsorted = true
		}
		bk.pos = append(bk.pos, i)
	}
	push := func(i int32) {
		if mg, ok := find(i); ok {
			add(i, mg)
		}
	}
	for i := int32(0); i < int32(n-1); i++ {
		push(i)
	}
	for len(sc.heap) > 0 {
		r := sc.popRank()
		b := sc.slot[r]
		// New buckets may be appended while this one is applied: read
		// it by index, never through a pointer.
		left, right, id := sc.buckets[b].left, sc.buckets[b].right, sc.buckets[b].id
		pos := sc.buckets[b].pos
		if sc.buckets[b].unsorted {
			slices.Sort(pos)
			sc.buckets[b].unsorted = false
		}
		cur, lower = r, false
		// The pair to the right of a merge is filed only once the pass
		// has moved on: when the pass's next merge takes its right
		// symbol, the queue would find it stale and skip it. A pair
		// ranked below the pass is filed at once (it goes first).
		deferred, deferredMerge := int32(-1), merge{}
		flush := func() {
			if deferred >= 0 {
				add(deferred, deferredMerge)
				deferred = -1
			}
		}
		k := 0
		for k < len(pos) && !lower {
			i := pos[k]
			k++
			if prev[i] == -2 || syms[i].id != left {
				continue
			}
			j := next[i]
			if j < 0 || syms[j].id != right {
				continue
			}
			if deferred >= 0 && deferred != prev[i] {
				flush()
			}
			deferred = -1 // (prev[i], i) is looked up again below
			syms[i].id = int32(id)
			syms[i].end = syms[j].end
			prev[j] = -2
			next[i] = next[j]
			if next[j] >= 0 {
				prev[next[j]] = i
			}
			if p := prev[i]; p >= 0 {
				push(p)
			}
			if mg, ok := find(i); ok {
				if mg.rank < r {
					add(i, mg)
				} else {
					deferred, deferredMerge = i, mg
				}
			}
		}
		flush()
		if k < len(pos) {
			// A lower rank goes first; this one resumes after it.
			sc.buckets[b].pos = pos[k:]
			sc.pushRank(r)
			continue
		}
		sc.buckets[b].pos = pos[:0]
		sc.slot[r] = -1
	}
	out := syms[:0]
	for i := int32(0); i >= 0 && int(i) < n; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

func (sc *rankScratch) pushRank(r uint32) {
	h := append(sc.heap, r)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p] <= h[i] {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	sc.heap = h
}

func (sc *rankScratch) popRank() uint32 {
	h := sc.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h[l] < h[m] {
			m = l
		}
		if r < n && h[r] < h[m] {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	sc.heap = h
	return top
}
