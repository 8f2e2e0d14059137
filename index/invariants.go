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
//   - nodes kept for reuse are unlinked and empty.
//
// It is O(size of the tree) and meant for tests and for validating an
// index kept across a shard restart.
func (t *Tree) CheckInvariants() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if len(t.root.holders) != 0 || t.root.parent != nil {
		return fail("root has holders or a parent")
	}
	for _, n := range t.spare {
		// A node kept for reuse must be unlinked and empty; one still in
		// the tree would be handed out twice.
		if n.parent != nil || len(n.holders) != 0 || n.childCount() != 0 || n == &t.root {
			return fail("spare node %d is still in use", n.hash)
		}
	}
	perRank := make([]int, len(t.ranks))
	nodes, entries := 0, 0
	stack := []*node{&t.root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n != &t.root {
			nodes++
			if err := t.checkNode(n, perRank); err != nil {
				return fail("node %d: %v", n.hash, err)
			}
			entries += len(n.holders)
		}
		if n.child != nil && n.kids != nil {
			return fail("node %d has both an inline child and a child map", n.hash)
		}
		if n.kids != nil && len(n.kids) < 2 {
			return fail("node %d has a child map of %d", n.hash, len(n.kids))
		}
		if err := t.checkFan(n); err != nil {
			return fail("node %d: %v", n.hash, err)
		}
		var linkErr error
		n.eachChild(func(c *node) {
			if c.parent != n && linkErr == nil {
				linkErr = fail("child %d of node %d points to another parent", c.hash, n.hash)
			}
			stack = append(stack, c)
		})
		if linkErr != nil {
			return linkErr
		}
		if n.kids != nil {
			for h, c := range n.kids {
				if c.hash != h {
					return fail("child map key %d holds node %d", h, c.hash)
				}
			}
		}
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
	if len(n.holders) == 0 {
		return errors.New("no holders")
	}
	for i, h := range n.holders {
		if i > 0 && n.holders[i-1].id >= h.id {
			return errors.New("holders not sorted or duplicated")
		}
		if int(h.id) >= len(t.ranks) || !t.ranks[h.id].live {
			return fmt.Errorf("holder id %d is not a registered rank", h.id)
		}
		rs := &t.ranks[h.id]
		if rs.blocks.get(h.ext) != n {
			return fmt.Errorf("rank %s: engine hash %d does not map back to the node", rs.rank, h.ext)
		}
		if n.parent != &t.root && !n.parent.has(h.id) {
			return fmt.Errorf("rank %s holds the node but not its parent", rs.rank)
		}
		perRank[h.id]++
	}
	return nil
}

// checkFan verifies n's per-rank child lists against its children.
func (t *Tree) checkFan(n *node) error {
	count := n.childCount()
	if n.fan == nil {
		if n != &t.root && count >= t.fanBuild {
			return fmt.Errorf("%d children and no fan", count)
		}
		return nil
	}
	if n == &t.root {
		return errors.New("the root has a fan")
	}
	if count <= t.fanDrop {
		return fmt.Errorf("fan kept with %d children", count)
	}
	listed := 0
	for id, l := range n.fan {
		if l == nil || len(*l) == 0 {
			return fmt.Errorf("empty fan list for rank id %d", id)
		}
		listed += len(*l)
	}
	held := 0
	var err error
	n.eachChild(func(c *node) {
		for _, h := range c.holders {
			held++
			if l := n.fan[h.id]; err == nil && (l == nil || int(h.pos) >= len(*l) || (*l)[h.pos] != c) {
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
