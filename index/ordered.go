package index

import (
	"slices"

	"github.com/kvrouter/kvrouter/kv"
)

// RankMatch is one rank's overlap, for answers in rank order.
type RankMatch struct {
	Rank kv.WorkerWithDpRank
	TierMatch
}

// compareRankMatches orders by rank (kv.CompareRanks).
func compareRankMatches(a, b RankMatch) int { return kv.CompareRanks(a.Rank, b.Rank) }

// rankOrder places a tree's interned rank ids in rank order, so a match
// can be answered in that order without sorting it: a lookup marks each
// matched rank's position in a dense array and sweeps it. At thousands of
// workers a comparison sort of the matches was half of a lookup's cost;
// the sweep is linear in the tree's ranks. Rebuilt lazily after ranks
// come or go, which is rare next to lookups.
type rankOrder struct {
	stale bool
	order []uint32 // live ids, by rank
	pos   []uint32 // id -> its index in order (live ids only)
	dense []uint32 // scratch: matched depth by position, 0 = no match
}

func (t *Tree) syncOrder() {
	o := &t.order
	if !o.stale && len(o.order) == len(t.ids) {
		return
	}
	o.order = o.order[:0]
	for _, id := range t.ids {
		o.order = append(o.order, id)
	}
	slices.SortFunc(o.order, func(a, b uint32) int { return kv.CompareRanks(t.ranks[a].rank, t.ranks[b].rank) })
	if cap(o.pos) < len(t.ranks) {
		o.pos = make([]uint32, len(t.ranks))
	}
	o.pos = o.pos[:len(t.ranks)]
	for i, id := range o.order {
		o.pos[id] = uint32(i)
	}
	if cap(o.dense) < len(o.order) {
		o.dense = make([]uint32, len(o.order))
	}
	o.dense = o.dense[:len(o.order)]
	o.stale = false
}

// appendOrdered appends depths (this tree's matches) to dst in rank order,
// with each rank's tree size.
func (t *Tree) appendOrdered(dst []RankMatch, depths []rankDepth) []RankMatch {
	if len(depths) == 0 {
		return dst
	}
	t.syncOrder()
	o := &t.order
	if len(depths)*8 < len(o.order) {
		// A few matches in a wide tree: sorting them beats a sweep.
		start := len(dst)
		for _, d := range depths {
			dst = append(dst, t.rankMatch(d.id, d.depth))
		}
		slices.SortFunc(dst[start:], compareRankMatches)
		return dst
	}
	for _, d := range depths {
		o.dense[o.pos[d.id]] = d.depth // matched depths are >= 1
	}
	for i, depth := range o.dense {
		if depth != 0 {
			dst = append(dst, t.rankMatch(o.order[i], depth))
			o.dense[i] = 0
		}
	}
	return dst
}

func (t *Tree) rankMatch(id, depth uint32) RankMatch {
	rs := &t.ranks[id]
	return RankMatch{Rank: rs.rank, TierMatch: TierMatch{Device: depth, TreeSize: uint64(rs.blocks.len())}}
}

// AppendMatches appends FindMatches's answer to dst as a slice in rank
// order (kv.CompareRanks): what a shard sends, without a map or a sort
// when only the device tier holds blocks. With lower-tier blocks the
// tiers are merged by rank through FindMatches, then sorted.
func (x *Indexer) AppendMatches(dst []RankMatch, hashes []kv.LocalBlockHash) []RankMatch {
	if x.tiers[kv.TierHostPinned].entries == 0 && x.tiers[kv.TierDisk].entries == 0 && x.tiers[kv.TierExternal].entries == 0 {
		dev := x.tiers[kv.TierDevice]
		x.depths = dev.matchDepths(hashes, x.depths[:0])
		return dev.appendOrdered(dst, x.depths)
	}
	x.merged = x.FindMatchesInto(x.merged, hashes)
	start := len(dst)
	for w, m := range x.merged {
		dst = append(dst, RankMatch{Rank: w, TierMatch: m})
	}
	slices.SortFunc(dst[start:], compareRankMatches)
	return dst
}
