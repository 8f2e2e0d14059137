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

// node is one block of the radix tree. It is kept at 80 bytes (the 80-byte
// size class): a single child and a single holder are stored inline, and a
// map or an array is only built for two or more, because most nodes below
// the first few levels of a prompt tree have exactly one child and, in a
// fleet whose prompts differ past a shared prefix, one holder. The inline
// holder saves an allocation per stored block and a cache miss per visit
// (the holder is on the node's own cache line), and halves the objects the
// GC marks in such an index.
type node struct {
	hash    kv.LocalBlockHash
	parent  *node
	child   *node                       // the only child, when there is exactly one
	kids    map[kv.LocalBlockHash]*node // all children, when there are two or more
	holders []holder                    // sorted by id, no duplicates; one[:1] when there is one
	fan     map[uint32]*[]*node         // wide nodes only: rank id -> children it holds (fan.go)
	one     [1]holder                   // the storage of a single holder (never copy a node)
}

func (n *node) childOf(h kv.LocalBlockHash) *node {
	if n.child != nil {
		if n.child.hash == h {
			return n.child
		}
		return nil
	}
	if n.kids != nil {
		return n.kids[h]
	}
	return nil
}

func (n *node) addChild(c *node) {
	switch {
	case n.kids != nil:
		n.kids[c.hash] = c
	case n.child != nil:
		n.kids = map[kv.LocalBlockHash]*node{n.child.hash: n.child, c.hash: c}
		n.child = nil
	default:
		n.child = c
	}
	c.parent = n
}

func (n *node) removeChild(c *node) {
	switch {
	case n.child == c:
		n.child = nil
	case n.kids != nil:
		delete(n.kids, c.hash)
		if len(n.kids) == 1 {
			for _, only := range n.kids {
				n.child = only
			}
			n.kids = nil
		}
	}
	c.parent = nil
}

func (n *node) childCount() int {
	if n.child != nil {
		return 1
	}
	return len(n.kids)
}

// eachChild calls fn for every child; fn must not add or remove children.
func (n *node) eachChild(fn func(*node)) {
	if n.child != nil {
		fn(n.child)
		return
	}
	for _, c := range n.kids {
		fn(c)
	}
}

// find returns the index of id in holders, or where it would be inserted
// and false.
func (n *node) find(id uint32) (int, bool) {
	lo, hi := 0, len(n.holders)
	if hi > interpolateFrom {
		lo, hi = n.window(id)
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if n.holders[mid].id < id {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(n.holders) && n.holders[lo].id == id
}

// interpolateFrom is the holder count above which find narrows its
// search before bisecting. Below it the whole set spans a few cache lines.
const interpolateFrom = 16

// window returns the range [lo, hi) of holders that can hold id or its
// insertion point, for a set of more than interpolateFrom holders. Ids are
// distinct and sorted, so holders[i].id is at least first+i and at most
// last-(len-1-i): that bounds where id can be from its ends alone, and a
// fleet-wide prefix (every rank a holder, ids nearly dense) narrows to a
// few slots. One probe where id would sit if the ids were spread evenly
// halves what is left. A binary search of a 1,000-holder set is ten
// dependent reads, most of them cache misses; this is about three.
func (n *node) window(id uint32) (int, int) {
	hs := n.holders
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

func (n *node) has(id uint32) bool {
	_, ok := n.find(id)
	return ok
}

func (n *node) insertHolder(at int, h holder) {
	if len(n.holders) == 0 {
		n.one[0] = h
		n.holders = n.one[:1:1] // a second holder moves the set to an array
		return
	}
	n.holders = append(n.holders, holder{})
	copy(n.holders[at+1:], n.holders[at:])
	n.holders[at] = h
}

// deleteHolder removes holders[at]. A set left with one holder moves back
// inline; when a set that once grew large has mostly emptied, it is copied
// into a right-sized slice. Either way churn does not pin memory.
func (n *node) deleteHolder(at int) {
	n.holders = append(n.holders[:at], n.holders[at+1:]...)
	switch l := len(n.holders); {
	case l == 0:
		n.holders = nil
	case l == 1 && &n.holders[0] != &n.one[0]:
		n.one[0] = n.holders[0]
		n.holders = n.one[:1:1]
	case cap(n.holders) >= 16 && l <= cap(n.holders)/4:
		n.holders = append([]holder(nil), n.holders...)
	}
}
