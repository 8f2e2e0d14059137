// Package hashtab is an open-addressing hash table for 64-bit hash keys:
// linear probing with backward-shift deletion (Knuth's Algorithm R).
//
// A rank's index entries (engine block name → node) churn as a whole:
// every stored block is inserted and every evicted one deleted. A Go map
// fits that badly:
//
//   - a delete leaves a tombstone until the map's next rehash, so a map
//     at a steady size that sees distinct keys come and go keeps
//     rehashing itself (12% of ingest CPU in BenchmarkApplyChurn) and its
//     lookups probe past keys that are gone;
//   - a read-modify-write is two probe sequences (a read, then an assign).
//
// Here a delete moves the rest of its probe run back over the hole, so no
// tombstone is ever left, and Upsert returns the slot to update in place.
//
// Keys are hashes chosen by others (engines, prompts, peers) and may be
// sequential in tests, so they are mixed with a per-table random seed
// before they pick a slot: a sender cannot aim its keys at one probe run
// without knowing the seed.
package hashtab

import (
	"math/bits"
	"math/rand/v2"
)

// Table maps keys to values. The zero Table is empty and ready to use. A
// pointer returned by Get or Upsert is valid until the next Upsert or
// Delete (either may move slots). Not safe for concurrent use.
type Table[K ~uint64, V any] struct {
	slots []slot[K, V] // power-of-two length, or nil while nothing was stored
	used  int          // slots holding a key (the zero key is kept apart)
	seed  uint64
	shift uint8 // 64 − log2(len(slots)): a mixed key's top bits pick its home

	// The zero key cannot both mark a free slot and be stored in one.
	zero    V
	hasZero bool
}

type slot[K ~uint64, V any] struct {
	key K // 0: free
	val V
}

const (
	minSlots = 8
	// A table doubles when an insert would fill more than 3/4 of it
	// (linear probing's runs lengthen quickly above that) and halves when
	// a delete leaves less than 1/8, so a table emptied after a burst
	// gives its memory back, and a steady add/delete cycle never resizes.
	growNum, growDen = 3, 4
	shrinkDen        = 8
	// A delete never shrinks a table to fewer than shrinkFloor slots: a
	// table that goes from empty to a few dozen keys and back (a rank
	// whose cache is cleared and refilled) would otherwise grow three
	// times and shrink three times each cycle. Below the floor a table
	// keeps what it grew to, at most 256 slots.
	shrinkFloor = 256
	// Reset keeps a table of up to this many slots for reuse.
	keepOnReset = 1024
)

// Len is the number of keys.
func (t *Table[K, V]) Len() int {
	if t.hasZero {
		return t.used + 1
	}
	return t.used
}

func (t *Table[K, V]) home(k K) int {
	hi, lo := bits.Mul64(uint64(k)^t.seed, 0x9e3779b97f4a7c15)
	return int((hi ^ lo) >> t.shift)
}

// Get returns k's value, or nil when k is absent.
func (t *Table[K, V]) Get(k K) *V {
	if k == 0 {
		if t.hasZero {
			return &t.zero
		}
		return nil
	}
	if t.used == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		switch s.key {
		case k:
			return &s.val
		case 0:
			return nil
		}
	}
}

// Touch reads k's home slot and returns part of what it read, so the load
// is not optimised away: a loop of touches over many keys has their cache
// misses in flight at once, and the lookups that follow hit the cache.
func (t *Table[K, V]) Touch(k K) uint64 {
	if t.used == 0 {
		return 0
	}
	return uint64(t.slots[t.home(k)].key)
}

// Upsert returns k's value, adding k with the zero value when absent
// (added says which).
func (t *Table[K, V]) Upsert(k K) (val *V, added bool) {
	if k == 0 {
		if !t.hasZero {
			var none V
			t.hasZero, t.zero = true, none
			return &t.zero, true
		}
		return &t.zero, false
	}
	if (t.used+1)*growDen > len(t.slots)*growNum {
		t.resize(max(minSlots, 2*len(t.slots)))
	}
	mask := len(t.slots) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		switch s.key {
		case k:
			return &s.val, false
		case 0:
			s.key = k
			t.used++
			return &s.val, true
		}
	}
}

// Put maps k to v, replacing what k mapped to.
func (t *Table[K, V]) Put(k K, v V) {
	p, _ := t.Upsert(k)
	*p = v
}

// Delete removes k; an absent key is ignored.
func (t *Table[K, V]) Delete(k K) {
	if k == 0 {
		var none V
		t.hasZero, t.zero = false, none
		return
	}
	if t.used == 0 {
		return
	}
	mask := len(t.slots) - 1
	i := t.home(k)
	for ; t.slots[i].key != k; i = (i + 1) & mask {
		if t.slots[i].key == 0 {
			return
		}
	}
	// Backward shift: an entry later in the run may fill the hole only if
	// its home is not in (hole, j]; it would otherwise sit before its
	// home, where lookups never look.
	for j := (i + 1) & mask; t.slots[j].key != 0; j = (j + 1) & mask {
		if (j-t.home(t.slots[j].key))&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot[K, V]{}
	t.used--
	if len(t.slots) > shrinkFloor && t.used*shrinkDen < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}

// Each calls fn for every key and its value, in no particular order; fn
// may change the value but must not Upsert or Delete.
func (t *Table[K, V]) Each(fn func(K, *V)) {
	if t.hasZero {
		fn(0, &t.zero)
	}
	for i := range t.slots {
		if s := &t.slots[i]; s.key != 0 {
			fn(s.key, &s.val)
		}
	}
}

// Reset empties the table, keeping its slots for reuse when there are at
// most keepOnReset of them (a scratch set's next use is usually as small).
func (t *Table[K, V]) Reset() {
	var none V
	t.zero, t.hasZero, t.used = none, false, 0
	if len(t.slots) > keepOnReset {
		t.slots = nil
		return
	}
	clear(t.slots)
}

func (t *Table[K, V]) resize(n int) {
	if t.seed == 0 {
		t.seed = rand.Uint64() | 1
	}
	old := t.slots
	t.slots = make([]slot[K, V], n)
	t.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	mask := n - 1
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := t.home(s.key)
		for t.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}
