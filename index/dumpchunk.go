package index

import "github.com/kvrouter/kvrouter/kv"

// A snapshot used to dump a shard's whole index in one message: 2.1 s for
// a 4 M-entry shard on the reference machine (BenchmarkDumpFullIndex),
// during which the shard answered no lookup, every time the snapshot
// replica purged the event stream. A chunked dump instead hands out whole
// ranks until a budget of entries is reached, and the shard serves other
// messages between chunks.
//
// Why ranks may be dumped at different moments: a rank's entries never
// depend on another rank's (a Stored event names its parent by the rank's
// own engine hash), and a snapshot taken after stream position S is always
// loaded and then followed by the replay of every event after S. For one
// rank dumped at a moment T after S, the replay re-applies events the dump
// already reflects: a repeated store is a no-op, a repeated removal finds
// nothing, and the events after T bring the rank to the same state. That
// is the argument the one-message dump already relied on (events after S
// could be applied before the shard read the dump query); it holds for
// each rank separately as long as each rank is dumped in one piece.

// DumpCursor is where a chunked dump resumes: a storage tier and a rank id
// of that tier's tree. The zero cursor starts a dump. Rank ids are plain
// numbers, so a cursor stays meaningful while the tree changes between
// chunks (a rank removed meanwhile is skipped; one registered under an id
// already passed is covered by the replay, since all its events came after
// the snapshot's position).
type DumpCursor struct {
	Tier int
	Rank uint32
}

// AppendDumpChunk appends the dumps of whole ranks, from c on, to out until
// at least maxEntries entries were appended or every rank is done. It
// returns the events, where the next chunk starts, and whether the dump is
// complete. Each rank's dump is a set of Stored events with Tier set: one
// per run of single-child nodes, parents before children, so applying the
// chunks to an empty index in order rebuilds the same content with the
// same engine hashes. Event ids are left 0 (the caller numbers them).
func (x *Indexer) AppendDumpChunk(out []kv.Event, c DumpCursor, maxEntries int) ([]kv.Event, DumpCursor, bool) {
	entries := 0
	for ; c.Tier < len(x.tiers); c.Tier, c.Rank = c.Tier+1, 0 {
		t := x.tiers[c.Tier]
		for ; int(c.Rank) < len(t.ranks); c.Rank++ {
			if entries >= maxEntries {
				return out, c, false
			}
			before := len(out)
			out = t.appendRankDump(out, c.Rank)
			for i := before; i < len(out); i++ {
				out[i].Tier = kv.StorageTier(c.Tier)
				entries += len(out[i].Blocks)
			}
		}
	}
	return out, c, true
}

// appendRankDump appends rank id's entries as chain events (see
// AppendDumpChunk). Under the prefix invariant a rank's nodes form
// subtrees hanging from the root: the walk starts at its nodes whose
// parent is the root and follows the children the rank holds (fan.go).
func (t *Tree) appendRankDump(out []kv.Event, id uint32) []kv.Event {
	rs := &t.ranks[id]
	if !rs.live || rs.blocks.len() == 0 {
		return out
	}
	type start struct {
		n         *node
		parentExt kv.ExternalBlockHash
		hasParent bool
	}
	var todo []start
	rs.blocks.t.Each(func(_ kv.ExternalBlockHash, r *nodeRef) {
		if n := t.arena.at(*r); n.parent == t.root.self {
			todo = append(todo, start{n: n})
		}
	})
	var kids []*node
	for len(todo) > 0 {
		st := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		ev := kv.Event{Worker: rs.rank, Kind: kv.EventStored, HasParent: st.hasParent, ParentHash: st.parentExt}
		for n := st.n; ; {
			at, ok := t.find(n, id)
			if !ok {
				break // impossible under the invariants; never emit a block the rank does not hold
			}
			ext := t.holders(n)[at].ext
			ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: ext, TokensHash: n.hash})
			kids = t.appendHeldChildren(kids[:0], n, id)
			if len(kids) == 1 {
				n = kids[0]
				continue
			}
			for _, k := range kids {
				todo = append(todo, start{n: k, parentExt: ext, hasParent: true})
			}
			break
		}
		if len(ev.Blocks) > 0 {
			out = append(out, ev)
		}
	}
	return out
}
