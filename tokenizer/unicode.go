package tokenizer

import (
	"sync"
	"unicode/utf8"
)

// Character classes of the split patterns. The tables come from the
// reference implementation's regex engine (see unicode_tables.go), not
// from Go's unicode package: a tokenizer must classify a character the
// way the reference does, and the two can be on different Unicode
// versions.
const (
	clsL uint16 = 1 << iota
	clsN
	clsM
	clsP
	clsS
	clsLu
	clsLt
	clsLm
	clsLo
	clsLl
	clsSpace // JavaScript's \s (White_Space plus U+FEFF)
)

type classRange struct {
	lo, hi rune
	bits   uint16
}

var (
	classOnce   sync.Once
	classStage1 []uint16      // code point >> 8 → block index
	classBlocks [][256]uint16 // deduplicated 256-code-point blocks
	asciiClass  [128]uint16
)

func initClasses() {
	classOnce.Do(func() {
		const planes = 0x110000 >> 8
		classStage1 = make([]uint16, planes)
		index := map[[256]uint16]uint16{}
		ri := 0
		for b := 0; b < planes; b++ {
			var blk [256]uint16
			base := rune(b << 8)
			for ri < len(classRanges) && classRanges[ri].hi < base {
				ri++
			}
			for j := ri; j < len(classRanges) && classRanges[j].lo < base+256; j++ {
				r := classRanges[j]
				for c := max(r.lo, base); c <= r.hi && c < base+256; c++ {
					blk[c-base] = r.bits
				}
			}
			id, ok := index[blk]
			if !ok {
				id = uint16(len(classBlocks))
				classBlocks = append(classBlocks, blk)
				index[blk] = id
			}
			classStage1[b] = id
		}
		for c := 0; c < 128; c++ {
			asciiClass[c] = classBlocks[classStage1[0]][c]
		}
	})
}

// class returns the classes of r (0 for invalid runes and surrogates).
func class(r rune) uint16 {
	if r < 128 {
		if r < 0 {
			return 0
		}
		return asciiClass[r]
	}
	if r > utf8.MaxRune {
		return 0
	}
	return classBlocks[classStage1[r>>8]][r&0xff]
}

// decode returns the rune at s[i] and its size; a byte that does not
// start valid UTF-8 is utf8.RuneError of size 1.
func decode(s string, i int) (rune, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return rune(c), 1
	}
	// Two- and three-byte sequences (Latin, Cyrillic, CJK, kana) inline;
	// the rest through the standard decoder.
	if c >= 0xC2 && c < 0xE0 && i+1 < len(s) && s[i+1]&0xC0 == 0x80 {
		return rune(c&0x1F)<<6 | rune(s[i+1]&0x3F), 2
	}
	if c >= 0xE1 && c < 0xF0 && c != 0xED && i+2 < len(s) && s[i+1]&0xC0 == 0x80 && s[i+2]&0xC0 == 0x80 {
		return rune(c&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F), 3
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runeClass decodes the rune at s[i] and returns its classes and size.
func runeClass(s string, i int) (rune, uint16, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), asciiClass[c], 1
	}
	r, n := decode(s, i)
	return r, class(r), n
}
