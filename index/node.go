package index

import "github.com/kvrouter/kvrouter/kv"

// holder is one rank's claim on a node: the rank's interned id and the
// engine's name for the block on that rank.
type holder struct {
	ext kv.ExternalBlockHash
	id  uint32
	// pos is the node's index in its parent's fan[id] while the parent has
	// a fan (see fan.go). It fills what was padding: a holder stays 16 bytes.
	pos uint32
}

// node is one block of the radix tree, 56 bytes with no pointers (see
// arena.go). A single child and a single holder are stored inline, and a
// child map or a holder array is only used for two or more, because most
// nodes below the first few levels of a prompt tree have exactly one
// child and, in a fleet whose prompts differ past a shared prefix, one
// holder: such a node is one cache line's worth of memory and nothing
// else.
type node struct {
	hash kv.LocalBlockHash
	one  [1]holder // the holder, when there is exactly one
	self nodeRef
	// parent is 0 for the root and for an unlinked node.
	parent nodeRef
	child  nodeRef // the only child, when there is exactly one
	kids   uint32  // the tree's child map (1 + index in Tree.kids), for two or more
	fan    uint32  // the tree's fan (1 + index in Tree.fans) of a wide node (fan.go)
	nh     uint32  // how many ranks hold the node
	set    holderSet
}

// node resolves a ref (nil for 0).
func (t *Tree) node(r nodeRef) *node {
	if r == 0 {
		return nil
	}
	return t.arena.at(r)
}

// holders is n's holder set, sorted by id with no duplicates. It aliases
// the node's storage: valid until the set changes.
func (t *Tree) holders(n *node) []holder {
	switch n.nh {
	case 0:
		return nil
	case 1:
		return n.one[:1:1]
	}
	return t.sets.slice(n.set, int(n.nh))
}

func (t *Tree) childOf(n *node, h kv.LocalBlockHash) *node {
	if n.child != 0 {
		if c := t.arena.at(n.child); c.hash == h {
			return c
		}
		return nil
	}
	if n.kids != 0 {
		if r, ok := t.kids.at(n.kids)[h]; ok {
			return t.arena.at(r)
		}
	}
	return nil
}

func (t *Tree) addChild(n, c *node) {
	switch {
	case n.kids != 0:
		t.kids.at(n.kids)[c.hash] = c.self
	case n.child != 0:
		only := t.arena.at(n.child)
		n.kids = t.kids.add(map[kv.LocalBlockHash]nodeRef{only.hash: only.self, c.hash: c.self})
		n.child = 0
	default:
		n.child = c.self
	}
	c.parent = n.self
}

func (t *Tree) removeChild(n, c *node) {
	switch {
	case n.child == c.self:
		n.child = 0
	case n.kids != 0:
		m := t.kids.at(n.kids)
		delete(m, c.hash)
		if len(m) == 1 {
			for _, only := range m {
				n.child = only
			}
			t.kids.drop(n.kids)
			n.kids = 0
		}
	}
	c.parent = 0
}

func (t *Tree) childCount(n *node) int {
	if n.child != 0 {
		return 1
	}
	if n.kids != 0 {
		return len(t.kids.at(n.kids))
	}
	return 0
}

// eachChild calls fn for every child; fn must not add or remove children.
func (t *Tree) eachChild(n *node, fn func(*node)) {
	if n.child != 0 {
		fn(t.arena.at(n.child))
		return
	}
	if n.kids != 0 {
		for _, c := range t.kids.at(n.kids) {
			fn(t.arena.at(c))
		}
	}
}

// find returns the index of id in n's holders, or where it would be
// inserted and false.
func (t *Tree) find(n *node, id uint32) (int, bool) {
	return findHolder(t.holders(n), id)
}

// findHolder returns the index of id in hs (sorted by id), or where it
// would be inserted and false.
func findHolder(hs []holder, id uint32) (int, bool) {
	lo, hi := 0, len(hs)
	if hi > interpolateFrom {
		lo, hi = window(hs, id)
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if hs[mid].id < id {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(hs) && hs[lo].id == id
}

// interpolateFrom is the holder count above which find narrows its
// search before bisecting. Below it the whole set spans a few cache lines.
const interpolateFrom = 16

// window returns the range [lo, hi) of hs that can hold id or its
// insertion point, for a set of more than interpolateFrom holders. Ids are
// distinct and sorted, so hs[i].id is at least first+i and at most
// last-(len-1-i): that bounds where id can be from its ends alone, and a
// fleet-wide prefix (every rank a holder, ids nearly dense) narrows to a
// few slots. One probe where id would sit if the ids were spread evenly
// halves what is left. A binary search of a 1,000-holder set is ten
// dependent reads, most of them cache misses; this is about three.
func window(hs []holder, id uint32) (int, int) {
	last := len(hs) - 1
	first, final := hs[0].id, hs[last].id
	switch {
	case id <= first:
		return 0, 0
	case id > final:
		return last + 1, last + 1
	}
	lo := max(0, last-int(final-id)) // id > first here, and id <= final
	hi := min(last, int(id-first)) + 1
	if hi-lo <= 8 {
		return lo, hi
	}
	guess := int(uint64(id-first) * uint64(last) / uint64(final-first))
	guess = min(max(guess, lo), hi-1)
	switch g := hs[guess].id; {
	case g == id:
		return guess, guess
	case g < id:
		return guess + 1, hi
	default:
		return lo, guess + 1
	}
}

func (t *Tree) holds(n *node, id uint32) bool {
	_, ok := t.find(n, id)
	return ok
}

// insertHolder inserts h at index at of n's holders. A second holder moves
// the set from the node into the pool; a full array moves to the next
// size class.
func (t *Tree) insertHolder(n *node, at int, h holder) {
	switch n.nh {
	case 0:
		n.one[0] = h
		n.nh = 1
		return
	case 1:
		s := t.sets.alloc(0)
		hs := t.sets.slice(s, 2)
		hs[at], hs[1-at] = h, n.one[0]
		n.one[0], n.set, n.nh = holder{}, s, 2
		return
	}
	hs := t.sets.slice(n.set, int(n.nh))
	if len(hs) == cap(hs) {
		bigger := t.sets.alloc(setClass(n.set) + 1)
		copy(t.sets.slice(bigger, len(hs)), hs)
		t.sets.release(n.set)
		n.set = bigger
		hs = t.sets.slice(bigger, len(hs))
	}
	hs = append(hs, holder{})
	copy(hs[at+1:], hs[at:])
	hs[at] = h
	n.nh++
}

// deleteHolder removes holder at of n. A set left with one holder moves
// back into the node; an array at most a quarter full moves to the class
// half its size (at least 16 holders), so churn does not pin memory and a
// set hovering at one size does not move back and forth.
func (t *Tree) deleteHolder(n *node, at int) {
	switch n.nh {
	case 1:
		n.one[0], n.nh = holder{}, 0
		return
	case 2:
		hs := t.sets.slice(n.set, 2)
		n.one[0] = hs[1-at]
		clear(hs)
		t.sets.release(n.set)
		n.set, n.nh = 0, 1
		return
	}
	hs := t.sets.slice(n.set, int(n.nh))
	copy(hs[at:], hs[at+1:])
	hs[len(hs)-1] = holder{}
	hs = hs[:len(hs)-1]
	n.nh--
	if c := cap(hs); c >= 16 && len(hs) <= c/4 {
		smaller := t.sets.alloc(setClass(n.set) - 1)
		copy(t.sets.slice(smaller, len(hs)), hs)
		clear(hs)
		t.sets.release(n.set)
		n.set = smaller
	}
}
