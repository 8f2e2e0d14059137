package index

import (
	"github.com/kvrouter/kvrouter/internal/hashtab"
	"github.com/kvrouter/kvrouter/kv"
)

// blockMap is one rank's engine hash -> node lookup (a pointer-free
// table: see arena.go). It is a hashtab
// table rather than a Go map for two reasons measured on a full index
// (BenchmarkApplyChurn: a thousand ranks at capacity, each step storing a
// chain and evicting one):
//
//   - A Go map that sees steady deletes and inserts of distinct keys fills
//     with tombstones and rehashes itself over and over: 12% of ingest CPU.
//     hashtab's deletes leave no tombstones.
//   - Every lookup of a cold rank is a cache miss, taken one after another
//     between the tree work. touch reads a key's home slot without using
//     the result, so a loop of touches over an event's blocks has many
//     misses in flight at once, and the lookups that follow hit the cache.
type blockMap struct {
	t hashtab.Table[kv.ExternalBlockHash, nodeRef]
}

func (m *blockMap) len() int { return m.t.Len() }

// get returns the node named k, or 0.
func (m *blockMap) get(k kv.ExternalBlockHash) nodeRef {
	if p := m.t.Get(k); p != nil {
		return *p
	}
	return 0
}

// touch reads k's home slot; see the type's comment.
func (m *blockMap) touch(k kv.ExternalBlockHash) uint64 { return m.t.Touch(k) }

// put maps k to n (not 0), replacing what k named before.
func (m *blockMap) put(k kv.ExternalBlockHash, n nodeRef) { m.t.Put(k, n) }

// del removes k if present.
func (m *blockMap) del(k kv.ExternalBlockHash) { m.t.Delete(k) }

// reset empties the map, keeping a small table for reuse.
func (m *blockMap) reset() { m.t.Reset() }

// nodes appends every mapped node to dst.
func (m *blockMap) nodes(dst []nodeRef) []nodeRef {
	m.t.Each(func(_ kv.ExternalBlockHash, n *nodeRef) { dst = append(dst, *n) })
	return dst
}
