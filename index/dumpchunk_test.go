package index

import (
	"math/rand/v2"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// randomIndex applies n random, often contradictory events (randomEvent)
// to a new indexer's device tier, and a few to its host tier.
func randomIndex(rng *rand.Rand, n int) *Indexer {
	x := New()
	for range n {
		tier := kv.StorageTier(0)
		if rng.IntN(5) == 0 {
			tier = 1
		}
		ev := randomEvent(rng, x.tiers[tier])
		if ev == nil {
			x.RemoveWorker(kv.WorkerID(rng.IntN(4)))
			continue
		}
		ev.Tier = tier
		_ = x.Apply(ev) // errors are part of the mix; the state is what counts
	}
	return x
}

// dumpAll runs a chunked dump to the end, calling between after each
// chunk but the last, and returns the events and the chunk count.
func dumpAll(t *testing.T, x *Indexer, maxEntries int, between func()) ([]kv.Event, int) {
	t.Helper()
	var out []kv.Event
	var c DumpCursor
	for chunks := 1; ; chunks++ {
		var done bool
		out, c, done = x.AppendDumpChunk(out, c, maxEntries)
		if done {
			return out, chunks
		}
		if chunks > 1_000_000 {
			t.Fatal("the dump does not end")
		}
		if between != nil {
			between()
		}
	}
}

func rebuild(t *testing.T, evs []kv.Event) *Indexer {
	t.Helper()
	x := New()
	for i := range evs {
		if err := x.Apply(&evs[i]); err != nil {
			t.Fatalf("dump event %d (%+v) does not apply: %v", i, evs[i], err)
		}
	}
	return x
}

// TestDumpChunksRebuildTheIndex: whatever the chunk budget, the chunks
// applied in order rebuild the same content (digest, entries, nodes) with
// the same engine names, as the one-piece Dump does, in fewer events.
func TestDumpChunksRebuildTheIndex(t *testing.T) {
	for seed := range 20 {
		rng := rand.New(rand.NewPCG(uint64(seed), 41))
		x := randomIndex(rng, 400)
		for _, budget := range []int{1, 7, 1 << 30} {
			evs, chunks := dumpAll(t, x, budget, nil)
			re := rebuild(t, evs)
			if re.Digest() != x.Digest() || re.Len() != x.Len() {
				t.Fatalf("seed %d, budget %d: rebuilt %d entries (digest %x), want %d (%x)", seed, budget, re.Len(), re.Digest(), x.Len(), x.Digest())
			}
			for tier := range x.tiers {
				if re.tiers[tier].Nodes() != x.tiers[tier].Nodes() {
					t.Fatalf("seed %d: tier %d rebuilt with %d nodes, want %d", seed, tier, re.tiers[tier].Nodes(), x.tiers[tier].Nodes())
				}
			}
			if err := re.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			// Same names: removing every name the original holds empties
			// the rebuilt index.
			for _, ev := range x.Dump() {
				rm := kv.Event{Worker: ev.Worker, Tier: ev.Tier, Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{ev.Blocks[0].BlockHash}}
				_ = re.Apply(&rm)
			}
			if re.Len() != 0 {
				t.Fatalf("seed %d: %d rebuilt entries are named differently", seed, re.Len())
			}
			if x.Len() > 0 && budget == 1 && chunks < 2 {
				t.Fatalf("seed %d: a budget of 1 entry took %d chunk", seed, chunks)
			}
			if x.Len() > 0 && len(evs) > len(x.Dump()) {
				t.Fatalf("seed %d: %d chain events, more than the %d single-block ones", seed, len(evs), len(x.Dump()))
			}
		}
	}
}

// wellFormedEvent is what an engine publishes: stores under a block the
// rank holds (or at the root) with names never used before, removals of
// blocks it holds, clears. Unlike randomEvent it never names a parent the
// rank lacks, which no snapshot can reproduce (see dumpchunk.go).
func wellFormedEvent(rng *rand.Rand, x *Indexer, next *uint64) *kv.Event {
	tr := x.tiers[0]
	r := rank(kv.WorkerID(rng.IntN(4)), uint32(rng.IntN(2)))
	var names []kv.ExternalBlockHash
	if id, ok := tr.ids[r]; ok {
		tr.ranks[id].blocks.t.Each(func(k kv.ExternalBlockHash, _ *nodeRef) { names = append(names, k) })
	}
	switch p := rng.IntN(100); {
	case p < 60 || len(names) == 0:
		ev := &kv.Event{Worker: r, Kind: kv.EventStored}
		if len(names) > 0 && rng.IntN(3) > 0 {
			ev.HasParent, ev.ParentHash = true, names[rng.IntN(len(names))]
		}
		for range 1 + rng.IntN(5) {
			*next++
			ev.Blocks = append(ev.Blocks, blk(*next, uint64(rng.IntN(3))))
		}
		return ev
	case p < 95:
		return &kv.Event{Worker: r, Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{names[rng.IntN(len(names))]}}
	default:
		return &kv.Event{Worker: r, Kind: kv.EventCleared}
	}
}

// TestDumpChunksWhileTheIndexChanges is the snapshot's contract: events
// keep arriving between chunks (the shard serves them), and loading the
// chunks then replaying every event after the snapshot's position gives
// the same index as the router that kept running.
func TestDumpChunksWhileTheIndexChanges(t *testing.T) {
	for seed := range 30 {
		rng := rand.New(rand.NewPCG(uint64(seed), 43))
		x := New()
		next := uint64(1 << 20)
		for range 300 {
			_ = x.Apply(wellFormedEvent(rng, x, &next))
		}
		var after []*kv.Event // the stream past the snapshot's position
		step := func(n int) {
			for range n {
				ev := wellFormedEvent(rng, x, &next)
				_ = x.Apply(ev)
				after = append(after, ev)
			}
		}
		evs, chunks := dumpAll(t, x, 3, func() { step(2) })
		step(20)
		if chunks < 2 {
			t.Fatalf("seed %d: one chunk, nothing changed between chunks", seed)
		}
		re := rebuild(t, evs)
		for _, ev := range after {
			_ = re.Apply(ev)
		}
		if re.Digest() != x.Digest() || re.Len() != x.Len() {
			t.Fatalf("seed %d (%d chunks, %d events after): loaded and replayed %d entries (%x), the running index %d (%x)",
				seed, chunks, len(after), re.Len(), re.Digest(), x.Len(), x.Digest())
		}
		if err := re.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
}
