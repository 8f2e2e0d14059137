package tokenizer

import (
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// bpe is a byte-pair-encoding model: the merges, applied lowest rank
// first (leftmost first among equal ranks), turn a piece's initial
// symbols into vocabulary tokens.
//
// Byte-level models (GPT-2, Llama-3, Qwen, DeepSeek, gpt-oss) work on the
// piece's UTF-8 bytes: a byte's initial symbol is the vocabulary entry of
// its GPT-2 alphabet character, so the ByteLevel mapping never
// materialises. Other models (SentencePiece-style: Llama-2, Mistral,
// Gemma) start from the piece's characters; a character with no
// vocabulary entry falls back to its <0xXX> byte tokens (byte_fallback)
// or to the unknown token.
type bpe struct {
	vocab     map[string]uint32 // token → id, added tokens included (as the reference does)
	merges    *pairTable        // left<<32 | right → merge
	byteLevel bool
	byteIDs   [256]int32 // byte-level: the initial symbol of each byte (-1: none)
	rawVocab  map[string]uint32
	// byte fallback: the <0xXX> token of each byte (-1: none)
	byteFallback bool
	fallbackIDs  [256]int32
	unk          int32 // -1: no unknown token
	fuseUnk      bool
	ignoreMerges bool

	cache wordCache

	rankPool *sync.Pool // mergeByRank's scratch
}

type merge struct{ rank, id uint32 }

const noRank = math.MaxUint32

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// symbol is one symbol of a word being merged: a vocabulary id (-1 for a
// character with none) and its bytes in the piece.
type symbol struct {
	id         int32
	start, end int32
}

// maxCachedPiece bounds the pieces kept in the word cache (the reference
// caches pieces under 256 characters too).
const maxCachedPiece = 256

// encodePiece appends the ids of one pre-tokenized piece.
func (m *bpe) encodePiece(dst []uint32, piece string) []uint32 {
	if len(piece) == 0 {
		return dst
	}
	if m.ignoreMerges {
		if m.byteLevel {
			if id, ok := m.rawVocab[piece]; ok {
				return append(dst, id)
			}
		} else if id, ok := m.vocab[piece]; ok {
			return append(dst, id)
		}
	}
	if len(piece) == 1 && m.byteLevel && !m.ignoreMerges && m.byteIDs[piece[0]] >= 0 {
		// One byte merges with nothing (a digit of a model that splits
		// numbers digit by digit): skip the cache.
		return append(dst, uint32(m.byteIDs[piece[0]]))
	}
	cacheable := len(piece) < maxCachedPiece
	if cacheable {
		if ids, ok := m.cache.get(piece); ok {
			return append(dst, ids...)
		}
	}
	start := len(dst)
	if len(piece) > 128 {
		dst = m.encodeLong(dst, piece)
	} else {
		var buf [128]symbol
		dst = m.appendIDs(dst, piece, m.mergeSmall(m.appendSymbols(buf[:0], piece)))
	}
	if cacheable {
		m.cache.put(piece, dst[start:])
	}
	return dst
}

// appendIDs appends the ids of a piece's merged symbols.
func (m *bpe) appendIDs(dst []uint32, piece string, syms []symbol) []uint32 {
	for _, s := range syms {
		if s.id >= 0 {
			dst = append(dst, uint32(s.id))
			continue
		}
		dst = m.appendUnknown(dst, piece[s.start:s.end])
	}
	return dst
}

// appendSymbols appends a piece's initial symbols: its bytes
// (byte-level) or its characters.
func (m *bpe) appendSymbols(syms []symbol, piece string) []symbol {
	if m.byteLevel {
		for i := 0; i < len(piece); i++ {
			syms = append(syms, symbol{id: m.byteIDs[piece[i]], start: int32(i), end: int32(i + 1)})
		}
		return syms
	}
	for i := 0; i < len(piece); {
		_, n := utf8.DecodeRuneInString(piece[i:])
		id, ok := m.vocab[piece[i:i+n]]
		sym := symbol{id: -1, start: int32(i), end: int32(i + n)}
		if ok {
			sym.id = int32(id)
		}
		syms = append(syms, sym)
		i += n
	}
	return syms
}

// appendUnknown appends the ids of a symbol with no vocabulary entry.
func (m *bpe) appendUnknown(dst []uint32, text string) []uint32 {
	if m.byteFallback {
		ok := true
		for i := 0; i < len(text); i++ {
			ok = ok && m.fallbackIDs[text[i]] >= 0
		}
		if ok {
			for i := 0; i < len(text); i++ {
				dst = append(dst, uint32(m.fallbackIDs[text[i]]))
			}
			return dst
		}
	}
	if m.unk >= 0 {
		if m.fuseUnk && len(dst) > 0 && dst[len(dst)-1] == uint32(m.unk) {
			return dst
		}
		return append(dst, uint32(m.unk))
	}
	return dst // no unknown token: the reference drops it too
}

// lookup returns the merge of a pair, or noRank.
func (m *bpe) lookup(a, b int32) merge {
	if a < 0 || b < 0 {
		return merge{rank: noRank}
	}
	if mg, ok := m.merges.get(pairKey(a, b)); ok {
		return mg
	}
	return merge{rank: noRank}
}

// mergeSmall merges a short word: a scan for the lowest rank per merge,
// with the pair ranks kept in an array (two lookups per merge).
func (m *bpe) mergeSmall(syms []symbol) []symbol {
	if len(syms) < 2 {
		return syms
	}
	var rbuf [128]merge
	ranks := rbuf[:len(syms)-1]
	for k := range ranks {
		ranks[k] = m.lookup(syms[k].id, syms[k+1].id)
	}
	for len(ranks) > 0 {
		best := -1
		bestRank := uint32(noRank)
		for k, r := range ranks {
			if r.rank < bestRank {
				best, bestRank = k, r.rank
			}
		}
		if best < 0 {
			break
		}
		syms[best].id = int32(ranks[best].id)
		syms[best].end = syms[best+1].end
		syms = append(syms[:best+1], syms[best+2:]...)
		ranks = append(ranks[:best], ranks[best+1:]...)
		if best > 0 {
			ranks[best-1] = m.lookup(syms[best-1].id, syms[best].id)
		}
		if best < len(ranks) {
			ranks[best] = m.lookup(syms[best].id, syms[best+1].id)
		}
	}
	return syms
}

// wordCache maps pieces to their ids: a direct-mapped table of
// immutable entries behind atomic pointers, so a hit costs one hash, one
// atomic load and a comparison, with no lock; a new piece replaces
// whatever shared its slot. Natural text repeats its common pieces, which
// keep their slots.
type wordCache struct {
	seed  maphash.Seed
	slots []atomic.Pointer[cacheEntry]
}

type cacheEntry struct {
	h   uint64
	key string
	ids []uint32
}

const cacheSlots = 1 << 16

func (c *wordCache) init() {
	c.seed = maphash.MakeSeed()
	c.slots = make([]atomic.Pointer[cacheEntry], cacheSlots)
}

func (c *wordCache) get(k string) ([]uint32, bool) {
	if c.slots == nil {
		return nil, false
	}
	h := maphash.String(c.seed, k)
	e := c.slots[h&(cacheSlots-1)].Load()
	if e != nil && e.h == h && e.key == k {
		return e.ids, true
	}
	return nil, false
}

func (c *wordCache) put(k string, ids []uint32) {
	if c.slots == nil {
		return
	}
	h := maphash.String(c.seed, k)
	e := &cacheEntry{h: h, key: strings.Clone(k), ids: slices.Clone(ids)}
	c.slots[h&(cacheSlots-1)].Store(e)
}

// ---- the GPT-2 byte alphabet ----

// byteChars maps each byte to the character that stands for it in
// byte-level vocabularies: printable Latin-1 bytes stand for themselves,
// the others (control bytes, space, a few Latin-1 ones) for U+0100 on.
var byteChars, charBytes = func() ([256]rune, map[rune]byte) {
	var fwd [256]rune
	back := make(map[rune]byte, 256)
	next := rune(256)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			fwd[b] = rune(b)
		} else {
			fwd[b] = next
			next++
		}
		back[fwd[b]] = byte(b)
	}
	return fwd, back
}()

// rawBytes maps a byte-level token back to its bytes (false if a
// character is outside the byte alphabet).
func rawBytes(tok string) (string, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := charBytes[r]
		if !ok {
			return "", false
		}
		out = append(out, b)
	}
	return string(out), true
}

func (m *bpe) init(byteLevel bool) error {
	m.byteLevel = byteLevel
	m.cache.init()
	for b := range 256 {
		m.byteIDs[b], m.fallbackIDs[b] = -1, -1
		if id, ok := m.vocab[string(byteChars[b])]; ok && byteLevel {
			m.byteIDs[b] = int32(id)
		}
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.fallbackIDs[b] = int32(id)
		}
	}
	if byteLevel {
		m.rawVocab = make(map[string]uint32, len(m.vocab))
		for tok, id := range m.vocab {
			if raw, ok := rawBytes(tok); ok {
				if old, dup := m.rawVocab[raw]; !dup || id < old {
					m.rawVocab[raw] = id
				}
			}
		}
	}
	return nil
}
