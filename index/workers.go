package index

import "github.com/kvrouter/kvrouter/kv"

// rankState is everything a tree keeps per worker rank. Ranks are interned
// to small ids so node holder sets store 4 bytes per rank, not 16.
type rankState struct {
	rank   kv.WorkerWithDpRank
	live   bool
	blocks blockMap // engine hash -> node, this rank's lookup
}

// internRank returns the id of a rank, registering it if new. Ids of
// removed workers are reused; by then no node holds them.
func (t *Tree) internRank(r kv.WorkerWithDpRank) uint32 {
	if id, ok := t.ids[r]; ok {
		return id
	}
	var id uint32
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		id = uint32(len(t.ranks))
		t.ranks = append(t.ranks, rankState{})
	}
	t.ranks[id] = rankState{rank: r, live: true}
	t.ids[r] = id
	t.order.stale = true
	t.workers[r.WorkerID] = append(t.workers[r.WorkerID], id)
	return id
}

// releaseRank forgets a rank whose blocks are all gone. The caller has
// already taken the rank's worker out of t.workers.
func (t *Tree) releaseRank(id uint32) {
	delete(t.ids, t.ranks[id].rank)
	t.ranks[id] = rankState{}
	t.free = append(t.free, id)
	t.order.stale = true
}
