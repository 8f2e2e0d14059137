package index

import (
	"iter"

	"github.com/kvrouter/kvrouter/kv"
)

// mix64 is the splitmix64 finaliser: a cheap bijection whose output bits
// all depend on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// pathStep extends the hash of a path by one block.
func pathStep(prefix uint64, h kv.LocalBlockHash) uint64 {
	return mix64(prefix*0x9e3779b97f4a7c15 ^ uint64(h) ^ 0x2545f4914f6cdd1d)
}

// entryHash hashes one (rank, path) entry.
func entryHash(path uint64, r kv.WorkerWithDpRank) uint64 {
	return mix64(path ^ mix64(uint64(r.WorkerID)^uint64(r.DpRank)<<40^0x51afd7ed558ccd))
}

// Digest is an order-independent fingerprint of the indexed content: the
// set of (rank, path of local hashes) entries. Two trees with the same
// content have the same digest whatever order their events arrived in and
// whatever engine hashes named the blocks; any difference changes it with
// overwhelming probability. It costs one walk of the tree.
func (t *Tree) Digest() uint64 {
	type frame struct {
		n    *node
		path uint64
	}
	var sum uint64
	stack := []frame{{n: t.root}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, h := range t.holders(f.n) {
			sum += entryHash(f.path, t.ranks[h.id].rank)
		}
		t.eachChild(f.n, func(c *node) {
			stack = append(stack, frame{n: c, path: pathStep(f.path, c.hash)})
		})
	}
	return sum
}

// Dump returns the tree as single-block Stored events, parents before
// children (breadth first), numbered from 0 as Dynamo's dump_tree_as_events
// does. Applying them to an empty tree rebuilds the same content with the
// same engine hashes. Ranks emptied by Cleared are not represented.
func (t *Tree) Dump() []kv.Event {
	out := make([]kv.Event, 0, t.entries)
	for ev := range t.DumpSeq() {
		out = append(out, ev)
	}
	return out
}

// DumpSeq yields the events of Dump one at a time, so a snapshot can be
// streamed without materialising it. The tree must not change while the
// sequence is being consumed.
func (t *Tree) DumpSeq() iter.Seq[kv.Event] {
	return func(yield func(kv.Event) bool) {
		var eventID uint64
		queue := []*node{t.root}
		for len(queue) > 0 {
			n := queue[0]
			queue = queue[1:]
			for _, h := range t.holders(n) {
				ev := kv.Event{
					Worker:  t.ranks[h.id].rank,
					EventID: eventID,
					Kind:    kv.EventStored,
					Blocks:  []kv.StoredBlock{{BlockHash: h.ext, TokensHash: n.hash}},
				}
				if p := t.node(n.parent); p != t.root {
					at, ok := t.find(p, h.id)
					if !ok {
						continue // impossible while holders shrink along paths; never emit an orphan
					}
					ev.HasParent = true
					ev.ParentHash = t.holders(p)[at].ext
				}
				eventID++
				if !yield(ev) {
					return
				}
			}
			t.eachChild(n, func(c *node) { queue = append(queue, c) })
		}
	}
}
