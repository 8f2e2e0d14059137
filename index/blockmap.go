package index

import (
	"math/rand/v2"

	"github.com/kvrouter/kvrouter/kv"
)

// blockMap is one rank's engine hash -> node lookup. It replaces a Go map
// for two reasons measured on a full index (BenchmarkApplyChurn: a
// thousand ranks at capacity, each step storing a chain and evicting one):
//
//   - A Go map that sees steady deletes and inserts of distinct keys fills
//     with tombstones and rehashes itself over and over: 12% of ingest CPU.
//     Linear probing with backward-shift deletion leaves no tombstones, so
//     a map at a steady size never rehashes.
//   - Every lookup of a cold rank is a cache miss, taken one after another
//     between the tree work. touch reads a key's home slot without using
//     the result, so a loop of touches over an event's blocks has many
//     misses in flight at once, and the lookups that follow hit the cache.
//
// Keys are engine-chosen, so they are mixed with a per-map random seed
// before they pick a slot: a publisher cannot aim its block names at one
// run of slots without knowing the seed.
type blockMap struct {
	slots []blockSlot // power-of-two length, or nil while empty
	n     int
	seed  uint64
}

type blockSlot struct {
	key  kv.ExternalBlockHash
	node *node // nil: the slot is free
}

// blockMapMinSlots is the first table's size; tables double past 3/4 full
// (linear probing's probe runs grow quickly above that).
const blockMapMinSlots = 8

func (m *blockMap) len() int { return m.n }

func (m *blockMap) home(k kv.ExternalBlockHash) int {
	h := uint64(k) ^ m.seed
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return int(h & uint64(len(m.slots)-1))
}

// get returns the node named k, or nil.
func (m *blockMap) get(k kv.ExternalBlockHash) *node {
	if m.n == 0 {
		return nil
	}
	mask := len(m.slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.node == nil {
			return nil
		}
		if s.key == k {
			return s.node
		}
	}
}

// touch reads k's home slot and returns what it read, so the load is not
// optimised away; see the type's comment.
func (m *blockMap) touch(k kv.ExternalBlockHash) uint64 {
	if m.n == 0 {
		return 0
	}
	return uint64(m.slots[m.home(k)].key)
}

// put maps k to n (not nil), replacing what k named before.
func (m *blockMap) put(k kv.ExternalBlockHash, n *node) {
	if (m.n+1)*4 > len(m.slots)*3 {
		m.grow()
	}
	mask := len(m.slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.node == nil {
			s.key, s.node = k, n
			m.n++
			return
		}
		if s.key == k {
			s.node = n
			return
		}
	}
}

// del removes k if present. The entries after it in its probe run move
// back over the hole, so no tombstone is left (Knuth's Algorithm R).
func (m *blockMap) del(k kv.ExternalBlockHash) {
	if m.n == 0 {
		return
	}
	mask := len(m.slots) - 1
	i := m.home(k)
	for {
		s := &m.slots[i]
		if s.node == nil {
			return
		}
		if s.key == k {
			break
		}
		i = (i + 1) & mask
	}
	m.n--
	hole := i
	for j := (hole + 1) & mask; ; j = (j + 1) & mask {
		s := &m.slots[j]
		if s.node == nil {
			break
		}
		// s may fill the hole only if its home is not in (hole, j]: it
		// would otherwise sit before its home, where lookups never look.
		h := m.home(s.key)
		if (j-h)&mask >= (j-hole)&mask {
			m.slots[hole] = *s
			hole = j
		}
	}
	m.slots[hole] = blockSlot{}
}

func (m *blockMap) grow() {
	old := m.slots
	size := max(blockMapMinSlots, 2*len(old))
	m.slots = make([]blockSlot, size)
	if m.seed == 0 {
		m.seed = rand.Uint64() | 1
	}
	m.n = 0
	for _, s := range old {
		if s.node != nil {
			m.put(s.key, s.node)
		}
	}
}

// reset empties the map, keeping a table of up to 1,024 slots for reuse
// (a scratch set's next use is usually as small).
func (m *blockMap) reset() {
	if len(m.slots) > 1024 {
		m.slots = nil
	} else {
		clear(m.slots)
	}
	m.n = 0
}

// nodes appends every mapped node to dst (in slot order).
func (m *blockMap) nodes(dst []*node) []*node {
	for _, s := range m.slots {
		if s.node != nil {
			dst = append(dst, s.node)
		}
	}
	return dst
}
