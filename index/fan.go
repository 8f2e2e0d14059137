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
func (t *Tree) buildFan(n *node) {
	n.fan = t.fans.add(make(map[uint32]*[]nodeRef))
	fan := t.fans.at(n.fan)
	t.eachChild(n, func(c *node) {
		hs := t.holders(c)
		for i := range hs {
			fanAdd(fan, hs, c, i)
		}
	})
}

// fanAdd lists child c in fan under the rank of hs[i] (c's holders).
func fanAdd(fan map[uint32]*[]nodeRef, hs []holder, c *node, i int) {
	id := hs[i].id
	l := fan[id]
	if l == nil {
		l = new([]nodeRef)
		fan[id] = l
	}
	hs[i].pos = uint32(len(*l))
	*l = append(*l, c.self)
}

// fanRemove takes the child at fan[id][pos] out of n's fan: the rank's last
// child fills the gap, and its holder entry learns its new position. A list
// that once grew large and has mostly emptied is copied to a right-sized one.
func (t *Tree) fanRemove(n *node, id, pos uint32) {
	fan := t.fans.at(n.fan)
	l := fan[id]
	s := *l
	last := uint32(len(s) - 1)
	if pos != last {
		moved := t.arena.at(s[last])
		s[pos] = s[last]
		at, _ := t.find(moved, id)
		t.holders(moved)[at].pos = pos
	}
	s = s[:last]
	switch {
	case last == 0:
		delete(fan, id)
	case cap(s) >= 16 && int(last) <= cap(s)/4:
		*l = append([]nodeRef(nil), s...)
	default:
		*l = s
	}
}

// appendHeldChildren appends to dst the children of n that rank id holds.
func (t *Tree) appendHeldChildren(dst []*node, n *node, id uint32) []*node {
	switch {
	case n.fan != 0:
		if l := t.fans.at(n.fan)[id]; l != nil {
			for _, r := range *l {
				dst = append(dst, t.arena.at(r))
			}
		}
	case n.child != 0:
		if c := t.arena.at(n.child); t.holds(c, id) {
			dst = append(dst, c)
		}
	case n.kids != 0:
		for _, r := range t.kids.at(n.kids) {
			if c := t.arena.at(r); t.holds(c, id) {
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
	return n.kids != 0 && n.fan == 0 && len(t.kids.at(n.kids)) >= t.fanBuild && n != t.root
}

// childRemoved drops n's fan when n has become narrow again.
func (t *Tree) childRemoved(n *node) {
	if n.fan != 0 && t.childCount(n) <= t.fanDrop {
		t.fans.drop(n.fan)
		n.fan = 0
	}
}

// dropFanOf forgets rank id's list in n's fan (every child listed is being
// dropped).
func (t *Tree) dropFanOf(n *node, id uint32) {
	if n.fan != 0 {
		delete(t.fans.at(n.fan), id)
	}
}
