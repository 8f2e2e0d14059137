package bench

import "github.com/kvrouter/kvrouter/kv"

// eventStore keeps a replay's planned KV events (millions of them) with no
// Go pointer per event: each event's fields in a pointer-free head, its
// blocks or removed names in large shared chunks. As one kv.Event and one
// array each, a 150 s step's 2.4 M planned events were ~5 M heap objects
// that every GC cycle marked, a second or more per cycle on the machine
// the router under test shares: the bench, not the router, set the
// lookups' tail. An event is rebuilt into a caller's scratch kv.Event when
// it is sent (the router copies what it is handed).
type eventStore struct {
	heads   []eventHead
	blocks  chunked[kv.StoredBlock]
	removed chunked[kv.ExternalBlockHash]
}

// eventHead is one event's fields and where its list is.
type eventHead struct {
	worker    kv.WorkerWithDpRank
	id        uint64
	parent    kv.ExternalBlockHash
	tier      kv.StorageTier
	kind      kv.EventKind
	hasParent bool
	at        chunkRef // its Blocks (Stored) or Removed list
}

// add stores a copy of ev and returns its index.
func (s *eventStore) add(ev *kv.Event) int {
	h := eventHead{worker: ev.Worker, id: ev.EventID, parent: ev.ParentHash, tier: ev.Tier, kind: ev.Kind, hasParent: ev.HasParent}
	if len(ev.Blocks) > 0 {
		h.at = s.blocks.add(ev.Blocks)
	} else {
		h.at = s.removed.add(ev.Removed)
	}
	s.heads = append(s.heads, h)
	return len(s.heads) - 1
}

// load rebuilds event i into ev, whose lists then alias the store: the
// caller must not modify them, and ev is valid until its next load.
func (s *eventStore) load(i int, ev *kv.Event) *kv.Event {
	h := &s.heads[i]
	*ev = kv.Event{Worker: h.worker, EventID: h.id, Tier: h.tier, Kind: h.kind, HasParent: h.hasParent, ParentHash: h.parent}
	if h.kind == kv.EventStored {
		ev.Blocks = s.blocks.get(h.at)
	} else {
		ev.Removed = s.removed.get(h.at)
	}
	return ev
}

// chunked keeps lists of T end to end in chunks of chunkLen (a longer
// list gets a chunk of its own), so a list is one slice of a chunk.
type chunked[T any] struct {
	chunks [][]T
}

// chunkRef says where a list is in a chunked.
type chunkRef struct {
	chunk, off, n uint32
}

const chunkLen = 1 << 20

func (c *chunked[T]) add(list []T) chunkRef {
	k := len(c.chunks) - 1
	if k < 0 || len(c.chunks[k])+len(list) > cap(c.chunks[k]) {
		c.chunks = append(c.chunks, make([]T, 0, max(chunkLen, len(list))))
		k++
	}
	off := len(c.chunks[k])
	c.chunks[k] = append(c.chunks[k], list...)
	return chunkRef{chunk: uint32(k), off: uint32(off), n: uint32(len(list))}
}

func (c *chunked[T]) get(r chunkRef) []T {
	return c.chunks[r.chunk][r.off : r.off+r.n : r.off+r.n]
}
