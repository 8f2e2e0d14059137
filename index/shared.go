package index

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/kv"
)

// LongestPrefix is how many consecutive blocks of hashes, from block 0,
// some rank of the tree holds: the depth of the walk while each node has
// a holder. It is the shared tier's answer (Dynamo's shared-cache hits of
// a prompt), where who holds a block does not matter, only that some
// store does.
func (t *Tree) LongestPrefix(hashes []kv.LocalBlockHash) uint32 {
	cur := t.root
	depth := uint32(0)
	for _, h := range hashes {
		next := t.childOf(cur, h)
		if next == nil || next.nh == 0 {
			break
		}
		cur = next
		depth++
	}
	return depth
}

// SharedPrefix is the prompt's longest prefix in the shared tier, whoever
// published it. It never enters FindMatches: a shared block is no
// worker's own overlap, and its publisher is not a routing candidate.
func (x *Indexer) SharedPrefix(hashes []kv.LocalBlockHash) uint32 {
	t := x.tiers[kv.TierShared]
	if t.entries == 0 {
		return 0
	}
	return t.LongestPrefix(hashes)
}

// SharedStores are the worker ids declared to be the fleet's shared KV
// store (an LMCache or Mooncake store publishing KV events as a worker):
// all their events belong to the shared tier whatever medium they name.
// A nil or empty set declares none.
type SharedStores map[kv.WorkerID]struct{}

// ParseSharedStores reads worker ids (decimal, as Dynamo's worker_id),
// each entry of ids possibly comma-separated.
func ParseSharedStores(ids []string) (SharedStores, error) {
	out := SharedStores{}
	for _, entry := range ids {
		for f := range strings.SplitSeq(entry, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			id, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("shared cache worker id %q: %w", f, err)
			}
			out[kv.WorkerID(id)] = struct{}{}
		}
	}
	return out, nil
}

// Holds reports whether w is a declared shared store.
func (s SharedStores) Holds(w kv.WorkerID) bool {
	_, ok := s[w]
	return ok
}

// Classify returns ev as the index should see it: an event of a declared
// store moves to the shared tier (a copy; ev is not modified), any other
// event is returned as is.
func (s SharedStores) Classify(ev *kv.Event) *kv.Event {
	if ev == nil || ev.Tier == kv.TierShared || !s.Holds(ev.Worker.WorkerID) {
		return ev
	}
	c := *ev
	c.Tier = kv.TierShared
	return &c
}
