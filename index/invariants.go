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
//   - the entry and node totals are right.
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
			if rs.blocks != nil || perRank[id] != 0 {
				return fail("released rank id %d still has blocks", id)
			}
			continue
		}
		if got, ok := t.ids[rs.rank]; !ok || got != uint32(id) {
			return fail("rank %s interned as %d but maps to %d", rs.rank, id, got)
		}
		if len(rs.blocks) != perRank[id] {
			return fail("rank %s: lookup has %d entries, tree has %d", rs.rank, len(rs.blocks), perRank[id])
		}
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
		if rs.blocks[h.ext] != n {
			return fmt.Errorf("rank %s: engine hash %d does not map back to the node", rs.rank, h.ext)
		}
		if n.parent != &t.root && !n.parent.has(h.id) {
			return fmt.Errorf("rank %s holds the node but not its parent", rs.rank)
		}
		perRank[h.id]++
	}
	return nil
}
