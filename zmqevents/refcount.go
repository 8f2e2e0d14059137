package zmqevents

import (
	"maps"

	"github.com/kvrouter/kvrouter/kv"
)

// refKey scopes a reference count: the same engine hash on another rank
// or tier is another copy.
type refKey struct {
	worker kv.WorkerWithDpRank
	tier   kv.StorageTier
	hash   kv.ExternalBlockHash
}

// RefCounter turns engine events into index events when an engine may
// store the same block hash more than once (vLLM keeps hash → {block id:
// block}; hybrid models with several KV cache groups publish each hash
// once per group). Only the first store of a hash reaches the index and
// only the removal of its last copy does, so removing one copy never
// evicts a block the engine still holds. It is pure and not safe for
// concurrent use.
type RefCounter struct {
	refs map[refKey]uint32
	// Suppressed counts stored blocks and removals absorbed because
	// another copy exists; Forwarded counts removals passed on.
	Suppressed, Forwarded uint64
}

// NewRefCounter returns an empty counter.
func NewRefCounter() *RefCounter { return &RefCounter{refs: make(map[refKey]uint32)} }

// Filter consumes one engine event and appends the index events it
// becomes to out: nothing when every block was a duplicate, one or more
// Stored events (a chain interrupted by duplicates splits into runs, each
// parented on the block before it), at most one Removed, or the Cleared.
func (c *RefCounter) Filter(ev *kv.Event, out []kv.Event) []kv.Event {
	switch ev.Kind {
	case kv.EventStored:
		return c.stored(ev, out)
	case kv.EventRemoved:
		return c.removed(ev, out)
	case kv.EventCleared:
		c.Forget(ev.Worker, ev.Tier)
	}
	return append(out, *ev)
}

func (c *RefCounter) stored(ev *kv.Event, out []kv.Event) []kv.Event {
	runStart := -1
	flush := func(end int) {
		if runStart < 0 {
			return
		}
		run := *ev
		run.Blocks = ev.Blocks[runStart:end]
		if runStart > 0 {
			run.HasParent, run.ParentHash = true, ev.Blocks[runStart-1].BlockHash
		}
		out = append(out, run)
		runStart = -1
	}
	for i, b := range ev.Blocks {
		k := refKey{ev.Worker, ev.Tier, b.BlockHash}
		n := c.refs[k]
		c.refs[k] = n + 1
		if n > 0 {
			c.Suppressed++
			flush(i)
			continue
		}
		if runStart < 0 {
			runStart = i
		}
	}
	flush(len(ev.Blocks))
	return out
}

func (c *RefCounter) removed(ev *kv.Event, out []kv.Event) []kv.Event {
	var gone []kv.ExternalBlockHash
	for _, h := range ev.Removed {
		k := refKey{ev.Worker, ev.Tier, h}
		switch n := c.refs[k]; {
		case n > 1:
			c.refs[k] = n - 1
			c.Suppressed++
			continue
		case n == 1:
			delete(c.refs, k)
		}
		// A hash never seen stored is passed on too: the index counts
		// the miss, which is how an operator sees a desynchronised stream.
		gone = append(gone, h)
		c.Forwarded++
	}
	if len(gone) == 0 {
		return out
	}
	rm := *ev
	rm.Removed = gone
	return append(out, rm)
}

// Forget drops every count of one rank on one tier, as the index does on
// that rank's Cleared; the worker's other ranks keep theirs.
func (c *RefCounter) Forget(w kv.WorkerWithDpRank, tier kv.StorageTier) {
	maps.DeleteFunc(c.refs, func(k refKey, _ uint32) bool { return k.worker == w && k.tier == tier })
}

// Len is the number of distinct (rank, tier, hash) copies held.
func (c *RefCounter) Len() int { return len(c.refs) }
