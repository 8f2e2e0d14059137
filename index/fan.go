package index

// Removing a block for a rank also drops the rank from the block's
// descendants (the cascade), so the cascade must find the children the rank
// holds. Testing every child costs O(children), and a block shared by a
// whole fleet (the first block of a common prompt) has children from every
// worker: thousands, of which one rank holds a few. A wide node therefore
// keeps a fan, per rank the children that rank holds, and the cascade visits
// only the rank's own subtree: O(blocks the rank holds below the node).
//
// Narrow nodes have no fan: scanning fewer than fanBuild children is cheaper
// than keeping a map, and most nodes have a single child. The fan is built
// when a node reaches fanBuild children and dropped when it falls to
// fanDrop, so a node hovering at one size does not rebuild it on every store
// and removal. The root never has one: it is never removed for a rank, so
// nothing enumerates its children by rank.
const (
	defaultFanBuild = 16
	defaultFanDrop  = 4
)

// buildFan indexes every child of n by the ranks holding it. The lists are
// held by pointer so that adding or removing a child costs one map lookup,
// not a lookup and a store.
func (n *node) buildFan() {
	n.fan = make(map[uint32]*[]*node)
	n.eachChild(func(c *node) {
		for i := range c.holders {
			n.fanAdd(c, i)
		}
	})
}

// fanAdd lists child c in n's fan under the rank of c.holders[i].
func (n *node) fanAdd(c *node, i int) {
	id := c.holders[i].id
	l := n.fan[id]
	if l == nil {
		l = new([]*node)
		n.fan[id] = l
	}
	c.holders[i].pos = uint32(len(*l))
	*l = append(*l, c)
}

// fanRemove takes the child at fan[id][pos] out of n's fan: the rank's last
// child fills the gap, and its holder entry learns its new position. A list
// that once grew large and has mostly emptied is copied to a right-sized one.
func (n *node) fanRemove(id, pos uint32) {
	l := n.fan[id]
	s := *l
	last := uint32(len(s) - 1)
	if pos != last {
		moved := s[last]
		s[pos] = moved
		at, _ := moved.find(id)
		moved.holders[at].pos = pos
	}
	s[last] = nil
	s = s[:last]
	switch {
	case last == 0:
		delete(n.fan, id)
	case cap(s) >= 16 && int(last) <= cap(s)/4:
		*l = append([]*node(nil), s...)
	default:
		*l = s
	}
}

// appendHeldChildren appends to dst the children of n that rank id holds.
func (n *node) appendHeldChildren(dst []*node, id uint32) []*node {
	switch {
	case n.fan != nil:
		if l := n.fan[id]; l != nil {
			dst = append(dst, *l...)
		}
	case n.child != nil:
		if n.child.has(id) {
			dst = append(dst, n.child)
		}
	default:
		for _, c := range n.kids {
			if c.has(id) {
				dst = append(dst, c)
			}
		}
	}
	return dst
}

// wantsFan reports whether n, which just gained a child, should now build
// its fan. It is on the path of every new block, so the test that fails
// there comes first: a node with a single child has no child map, and
// fanBuild is at least 2.
func (t *Tree) wantsFan(n *node) bool {
	return n.kids != nil && n.fan == nil && len(n.kids) >= t.fanBuild && n != &t.root
}

// childRemoved drops n's fan when n has become narrow again.
func (t *Tree) childRemoved(n *node) {
	if n.fan != nil && n.childCount() <= t.fanDrop {
		n.fan = nil
	}
}
