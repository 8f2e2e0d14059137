package index

import (
	"errors"
	"fmt"
)

// ErrCorrupt is wrapped by every CheckInvariants failure.
var ErrCorrupt = errors.New("index invariant violated")

// CheckInvariants walks the whole tree and verifies that:
//   - every non-root node is held by at least one rank, its holders are
//     sorted and unique, and belong to registered ranks;
//   - parent and child links agree, and a node with a child map has at
//     least two children;
//   - a rank holding a node holds its parent (holder sets shrink along a
//     path);
//   - every holder's engine hash maps back to that node in the rank's
//     lookup, and every lookup entry is matched by a holder, so every
//     lookup entry is reachable from the root;
//   - a node has a fan exactly when it is wide (see fan.go), and the fan
//     lists every (rank, child) pair once, at the position the child's
//     holder entry records;
//   - every live rank is listed once under its worker, and nothing else is;
//   - the entry and node totals are right;
//   - the arena's accounting holds (arena.go): every node knows its own
//     ref, nodes kept for reuse are unlinked and empty, and every holder
//     array, child map and fan in use belongs to exactly one node.
//
// It is O(size of the tree) and meant for tests and for validating an
// index kept across a shard restart.
func (t *Tree) CheckInvariants() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if t.root.nh != 0 || t.root.parent != 0 {
		return fail("root has holders or a parent")
	}
	for _, r := range t.arena.free {
		// A node kept for reuse must be unlinked and empty; one still in
		// the tree would be handed out twice.
		n := t.arena.at(r)
		if n.parent != 0 || n.nh != 0 || n.child != 0 || n.kids != 0 || n.fan != 0 || n == t.root {
			return fail("free node ref %d is still in use", r)
		}
	}
	perRank := make([]int, len(t.ranks))
	nodes, entries := 0, 0
	var sets [holderClasses]int
	kids, fans := 0, 0
	stack := []*node{t.root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if t.arena.at(n.self) != n {
			return fail("node %d does not know its own ref", n.hash)
		}
		if n != t.root {
			nodes++
			if err := t.checkNode(n, perRank); err != nil {
				return fail("node %d: %v", n.hash, err)
			}
			entries += int(n.nh)
		}
		if n.nh >= 2 {
			if holderCap(setClass(n.set)) < int(n.nh) {
				return fail("node %d: %d holders in an array of %d", n.hash, n.nh, holderCap(setClass(n.set)))
			}
			sets[setClass(n.set)]++
		}
		if n.child != 0 && n.kids != 0 {
			return fail("node %d has both an inline child and a child map", n.hash)
		}
		if n.kids != 0 {
			kids++
			if c := len(t.kids.at(n.kids)); c < 2 {
				return fail("node %d has a child map of %d", n.hash, c)
			}
		}
		if n.fan != 0 {
			fans++
		}
		if err := t.checkFan(n); err != nil {
			return fail("node %d: %v", n.hash, err)
		}
		var linkErr error
		t.eachChild(n, func(c *node) {
			if c.parent != n.self && linkErr == nil {
				linkErr = fail("child %d of node %d points to another parent", c.hash, n.hash)
			}
			stack = append(stack, c)
		})
		if linkErr != nil {
			return linkErr
		}
		if n.kids != 0 {
			for h, c := range t.kids.at(n.kids) {
				if t.arena.at(c).hash != h {
					return fail("child map key %d holds node %d", h, t.arena.at(c).hash)
				}
			}
		}
	}
	if err := t.checkStorage(nodes, sets, kids, fans); err != nil {
		return fail("%v", err)
	}
	for id := range t.ranks {
		rs := &t.ranks[id]
		if !rs.live {
			if rs.blocks.len() != 0 || perRank[id] != 0 {
				return fail("released rank id %d still has blocks", id)
			}
			continue
		}
		if got, ok := t.ids[rs.rank]; !ok || got != uint32(id) {
			return fail("rank %s interned as %d but maps to %d", rs.rank, id, got)
		}
		if rs.blocks.len() != perRank[id] {
			return fail("rank %s: lookup has %d entries, tree has %d", rs.rank, rs.blocks.len(), perRank[id])
		}
	}
	if err := t.checkWorkers(); err != nil {
		return fail("%v", err)
	}
	if len(t.ids)+len(t.free) != len(t.ranks) {
		return fail("%d ranks interned, %d free, %d slots", len(t.ids), len(t.free), len(t.ranks))
	}
	if nodes != t.nodes || entries != t.entries {
		return fail("counted %d nodes / %d entries, tracked %d / %d", nodes, entries, t.nodes, t.entries)
	}
	return nil
}

func (t *Tree) checkNode(n *node, perRank []int) error {
	hs := t.holders(n)
	if len(hs) == 0 {
		return errors.New("no holders")
	}
	for i, h := range hs {
		if i > 0 && hs[i-1].id >= h.id {
			return errors.New("holders not sorted or duplicated")
		}
		if int(h.id) >= len(t.ranks) || !t.ranks[h.id].live {
			return fmt.Errorf("holder id %d is not a registered rank", h.id)
		}
		rs := &t.ranks[h.id]
		if rs.blocks.get(h.ext) != n.self {
			return fmt.Errorf("rank %s: engine hash %d does not map back to the node", rs.rank, h.ext)
		}
		if p := t.node(n.parent); p != t.root && !t.holds(p, h.id) {
			return fmt.Errorf("rank %s holds the node but not its parent", rs.rank)
		}
		perRank[h.id]++
	}
	return nil
}

// checkFan verifies n's per-rank child lists against its children.
func (t *Tree) checkFan(n *node) error {
	count := t.childCount(n)
	if n.fan == 0 {
		if n != t.root && count >= t.fanBuild {
			return fmt.Errorf("%d children and no fan", count)
		}
		return nil
	}
	if n == t.root {
		return errors.New("the root has a fan")
	}
	if count <= t.fanDrop {
		return fmt.Errorf("fan kept with %d children", count)
	}
	fan := t.fans.at(n.fan)
	listed := 0
	for id, l := range fan {
		if l == nil || len(*l) == 0 {
			return fmt.Errorf("empty fan list for rank id %d", id)
		}
		listed += len(*l)
	}
	held := 0
	var err error
	t.eachChild(n, func(c *node) {
		for _, h := range t.holders(c) {
			held++
			if l := fan[h.id]; err == nil && (l == nil || int(h.pos) >= len(*l) || (*l)[h.pos] != c.self) {
				err = fmt.Errorf("child %d is not at %d in the fan of rank id %d", c.hash, h.pos, h.id)
			}
		}
	})
	if err != nil {
		return err
	}
	if listed != held {
		return fmt.Errorf("fan lists %d children, the children have %d holders", listed, held)
	}
	return nil
}

// checkStorage verifies the arena's accounting against what the walk
// found: every node handed out is in the tree or free, and every holder
// array, child map and fan in use is a node's.
func (t *Tree) checkStorage(nodes int, sets [holderClasses]int, kids, fans int) error {
	if handed := max(int(t.arena.next)-1, 0); handed != nodes+1+len(t.arena.free) {
		return fmt.Errorf("%d node refs handed out, %d in the tree (and the root), %d free", handed, nodes, len(t.arena.free))
	}
	for c := range sets {
		hc := &t.sets.classes[c]
		if live := int(hc.next) - len(hc.free); live != sets[c] {
			return fmt.Errorf("holder class %d: %d arrays in use, %d nodes use one", c, live, sets[c])
		}
	}
	if t.kids.live() != kids || t.fans.live() != fans {
		return fmt.Errorf("%d child maps and %d fans in use, nodes use %d and %d", t.kids.live(), t.fans.live(), kids, fans)
	}
	return nil
}

// checkWorkers verifies that t.workers lists every live rank once, under
// its own worker.
func (t *Tree) checkWorkers() error {
	seen := make([]bool, len(t.ranks))
	listed := 0
	for w, ids := range t.workers {
		if len(ids) == 0 {
			return fmt.Errorf("worker %d listed with no ranks", w)
		}
		for _, id := range ids {
			if int(id) >= len(t.ranks) || !t.ranks[id].live || t.ranks[id].rank.WorkerID != w || seen[id] {
				return fmt.Errorf("worker %d lists rank id %d, which is not one of its live ranks or is listed twice", w, id)
			}
			seen[id] = true
		}
		listed += len(ids)
	}
	if listed != len(t.ids) {
		return fmt.Errorf("%d ranks listed under workers, %d interned", listed, len(t.ids))
	}
	return nil
}
