package tokenizer

import "unicode/utf8"

// Merging a run of one repeated symbol (a megabyte of spaces, of one
// letter) without a symbol per byte.
//
// BPE, the reference's queue and mergeWith alike, repeatedly merges the
// leftmost occurrence of the lowest-ranked adjacent pair; what it does
// next depends only on the symbols, never on how they came about. A run
// X^k followed by a short tail therefore stays in that shape, and is
// followed step by step:
//
//   - When (X, X) is the lowest pair, the queue merges it at positions
//     0-1, 2-3, ... left to right, as long as no pair this creates ranks
//     below it: (XX, X) after the first merge, (XX, XX) after the second.
//     If neither can, the whole pass is one step: (XX)^(k/2), the odd X
//     left over going to the front of the tail. If one can, or the pair
//     (X, X) also occurs inside the tail, the run is handed to mergeWith.
//   - When the lowest pair is at the run's right end or inside the tail,
//     it is merged there (its leftmost occurrence: the run holds no other
//     pair than (X, X)). Such a merge does not lengthen the tail.
//
// A pass halves the run, so a run of n symbols takes about log n passes
// over a tail of a few symbols, instead of n symbols and 3n filed pairs.
// TestMergeRunMatchesQueue and FuzzMergeRun compare it with the queue.

// runSym is a symbol of a run: its id and its length in bytes.
type runSym struct{ id, size int32 }

// maxRunTail bounds the tail; a longer one is handed to mergeWith. Each
// pass adds one symbol at most, and a pass doubles X's bytes, so a
// vocabulary's longest token bounds the passes well below it.
const maxRunTail = 64

// runUnit returns the initial symbol a piece repeats, if it is one
// symbol repeated (a byte for byte-level models, a character otherwise)
// that has an id.
func (m *bpe) runUnit(piece string) (runSym, bool) {
	w := 1
	if !m.byteLevel {
		_, w = utf8.DecodeRuneInString(piece)
	}
	if len(piece) < 2*w || len(piece)%w != 0 || piece[w:] != piece[:len(piece)-w] {
		return runSym{}, false // piece[w:] == piece[:n-w]: period w
	}
	id := int32(-1)
	if m.byteLevel {
		id = m.byteIDs[piece[0]]
	} else if v, ok := m.vocab[piece[:w]]; ok {
		id = int32(v)
	}
	return runSym{id: id, size: int32(w)}, id >= 0
}

// mergeRun merges a piece that is one symbol repeated; ok is false when
// the piece is not one.
func (m *bpe) mergeRun(sc *rankScratch, piece string) (syms []symbol, ok bool) {
	x, ok := m.runUnit(piece)
	if !ok {
		return nil, false
	}
	k := len(piece) / int(x.size)
	var buf [maxRunTail]runSym
	tail := buf[:0]
	for {
		best, at := merge{rank: noRank}, -2 // at: -1 the run's (X, X); i the pair ending at tail[i]
		if k >= 2 {
			if mg := m.lookup(x.id, x.id); mg.rank < best.rank {
				best, at = mg, -1
			}
		}
		for i := range tail {
			left := x
			if i > 0 {
				left = tail[i-1]
			} else if k == 0 {
				continue
			}
			if k >= 2 && left.id == x.id && tail[i].id == x.id {
				return m.runSymbols(sc, x, k, tail, true), true // the run's pair recurs in the tail
			}
			if mg := m.lookup(left.id, tail[i].id); mg.rank < best.rank {
				best, at = mg, i
			}
		}
		switch {
		case at == -2:
			return m.runSymbols(sc, x, k, tail, false), true
		case at == 0:
			k--
			tail[0] = runSym{id: int32(best.id), size: x.size + tail[0].size}
		case at > 0:
			tail[at-1] = runSym{id: int32(best.id), size: tail[at-1].size + tail[at].size}
			tail = append(tail[:at], tail[at+1:]...)
		default:
			xx := runSym{id: int32(best.id), size: 2 * x.size}
			if k >= 3 && m.lookup(xx.id, x.id).rank < best.rank ||
				k >= 4 && m.lookup(xx.id, xx.id).rank < best.rank ||
				k%2 == 1 && len(tail) == maxRunTail {
				return m.runSymbols(sc, x, k, tail, true), true
			}
			if k%2 == 1 {
				tail = append(tail, runSym{})
				copy(tail[1:], tail)
				tail[0] = x
			}
			x, k = xx, k/2
		}
	}
}

// runSymbols lays out X^k and the tail as symbols, merged by mergeWith
// when merge is set.
func (m *bpe) runSymbols(sc *rankScratch, x runSym, k int, tail []runSym, merge bool) []symbol {
	n := k + len(tail)
	syms := sc.syms[:0]
	if cap(syms) < n {
		syms = make([]symbol, 0, n)
		if n <= maxKeptSymbols {
			sc.syms = syms
		}
	}
	off := int32(0)
	for range k {
		syms = append(syms, symbol{id: x.id, start: off, end: off + x.size})
		off += x.size
	}
	for _, t := range tail {
		syms = append(syms, symbol{id: t.id, start: off, end: off + t.size})
		off += t.size
	}
	if merge && n >= 2 {
		return m.mergeWith(sc, syms)
	}
	return syms
}
