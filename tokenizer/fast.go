package tokenizer

import (
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// nfc is the NFC normalizer with a fast path: text whose every character
// is NFC-stable on its own and composes with nothing (below U+0300 — no
// combining marks there —, CJK ideographs, kana without the voicing
// marks, CJK punctuation but its tone marks, fullwidth forms) is already
// NFC. The quick check of golang.org/x/text was a third of the time of
// tokenizing Chinese.
func nfc(s string) string {
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			i++
			continue
		}
		r, n := decode(s, i)
		if !nfcInert(r) {
			return norm.NFC.String(s)
		}
		i += n
	}
	return s
}

func nfcInert(r rune) bool {
	switch {
	case r < 0x300:
		return r != utf8.RuneError
	case r >= 0x4E00 && r < 0xA000:
		return true
	case r >= 0x3000 && r < 0x302A, r >= 0x3030 && r < 0x3099, r >= 0x309B && r < 0x3100:
		return true
	case r >= 0xFF00 && r < 0xFFF0:
		return true
	}
	return false
}

// pairTable maps a merge pair (left<<32 | right) to its merge: open
// addressing with linear probing, twice as fast as a Go map on the
// merge loop's lookups.
type pairTable struct {
	keys  []uint64
	vals  []merge
	shift uint
}

const emptyPair = ^uint64(0) // ids are below 2^24: no real pair

func newPairTable(n int) *pairTable {
	size, shift := 16, uint(60)
	for size < 2*n {
		size <<= 1
		shift--
	}
	t := &pairTable{keys: make([]uint64, size), vals: make([]merge, size), shift: shift}
	for i := range t.keys {
		t.keys[i] = emptyPair
	}
	return t
}

func (t *pairTable) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// put sets a pair's merge (a later put of the same pair replaces it).
func (t *pairTable) put(k uint64, m merge) {
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		if t.keys[i] == emptyPair || t.keys[i] == k {
			t.keys[i], t.vals[i] = k, m
			return
		}
	}
}

func (t *pairTable) get(k uint64) (merge, bool) {
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return t.vals[i], true
		case emptyPair:
			return merge{}, false
		}
	}
}
