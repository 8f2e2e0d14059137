package actors

import (
	"testing"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/kv"
)

// TestDumpIndexRebuildsTheIndex: a dump taken in many small chunks (a few
// entries each, from two shards), applied to another router, gives the
// same index digest; the chain events are fewer than the entries.
func TestDumpIndexRebuildsTheIndex(t *testing.T) {
	a := startRouter(t, func(c *Config) { c.dumpChunkEntries = 5 })
	b := startRouter(t, nil)
	register(t, a, 1, 2, 3, 4, 5, 6)
	register(t, b, 1, 2, 3, 4, 5, 6)
	for w := range 6 {
		shared := prompt(64, 9)                                                                                    // 4 blocks every worker holds
		storeChain(a, kv.WorkerWithDpRank{WorkerID: kv.WorkerID(w + 1)}, append(shared, prompt(96, uint32(w))...)) // + 6 of its own
		storeChain(a, kv.WorkerWithDpRank{WorkerID: kv.WorkerID(w + 1)}, prompt(48, uint32(20+w%2)))
	}
	if err := a.Barrier(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	dump, err := a.DumpIndex(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	entries := 0
	for _, m := range dump {
		ev, err := events.FromProto(m)
		if err != nil {
			t.Fatalf("dump event %v: %v", m, err)
		}
		entries += len(ev.Blocks)
		b.ApplyEvent(&ev)
	}
	if entries != 6*(10+3) || len(dump) >= entries {
		t.Fatalf("dump: %d events carrying %d entries, want 78 entries in fewer events", len(dump), entries)
	}
	if err := b.Barrier(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	da, err := a.IndexDigest(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	db, err := b.IndexDigest(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if da == 0 || da != db {
		t.Fatalf("digest of the rebuilt index %x, the original's %x", db, da)
	}
}
