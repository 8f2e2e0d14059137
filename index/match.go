package index

import "github.com/kvrouter/kvrouter/kv"

// OverlapScores is a tree's answer to a prompt: per rank, how many blocks
// from block 0 onwards it holds, and how many blocks it holds in total.
type OverlapScores struct {
	Scores    map[kv.WorkerWithDpRank]uint32
	TreeSizes map[kv.WorkerWithDpRank]uint64
}

// rankDepth is one rank's matched depth, by interned id.
type rankDepth struct {
	id    uint32
	depth uint32
}

// FindMatches returns, for every rank holding at least block 0 of hashes,
// the number of consecutive blocks from block 0 it holds.
//
// earlyExit is Dynamo's flag to stop once a single rank is left. Here it
// never changes the result: because holder sets shrink along a path, a
// lone survivor costs one child lookup per level and its true depth is
// always reported (Dynamo truncates it). The flag is kept so callers can
// state intent and for parity with Dynamo's API.
func (t *Tree) FindMatches(hashes []kv.LocalBlockHash, earlyExit bool) OverlapScores {
	depths := t.matchDepths(hashes, nil)
	out := OverlapScores{
		Scores:    make(map[kv.WorkerWithDpRank]uint32, len(depths)),
		TreeSizes: make(map[kv.WorkerWithDpRank]uint64, len(depths)),
	}
	for _, d := range depths {
		rs := &t.ranks[d.id]
		out.Scores[rs.rank] = d.depth
		out.TreeSizes[rs.rank] = uint64(rs.blocks.len())
	}
	return out
}

// matchDepths appends to dst the matched depth of every rank with a
// non-zero match.
//
// The walk follows hashes from the root. At each level the set of ranks
// still matching is exactly the holder set of the current node (holders
// only shrink along a path), so a child with as many holders as its parent
// lost nobody, and otherwise the ranks in the parent but not in the child
// stop at the current depth. Both holder lists are sorted by id, so that
// difference is one merge.
func (t *Tree) matchDepths(hashes []kv.LocalBlockHash, dst []rankDepth) []rankDepth {
	cur := t.root
	depth := uint32(0)
	for _, h := range hashes {
		next := t.childOf(cur, h)
		if next == nil {
			break
		}
		if cur != t.root && next.nh != cur.nh {
			dst = appendDropped(dst, t.holders(cur), t.holders(next), depth)
		}
		cur = next
		depth++
	}
	for _, h := range t.holders(cur) {
		dst = append(dst, rankDepth{id: h.id, depth: depth})
	}
	return dst
}

// appendDropped appends the ids of parent \ child (child ⊆ parent).
func appendDropped(dst []rankDepth, parent, child []holder, depth uint32) []rankDepth {
	j := 0
	for _, p := range parent {
		if j < len(child) && child[j].id == p.id {
			j++
			continue
		}
		dst = append(dst, rankDepth{id: p.id, depth: depth})
	}
	return dst
}
