package index

import (
	"errors"
	"maps"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func onTier(tier kv.StorageTier, ev *kv.Event) *kv.Event {
	ev.Tier = tier
	return ev
}

func mustApplyIndexer(t *testing.T, x *Indexer, evs ...*kv.Event) {
	t.Helper()
	for _, ev := range evs {
		if err := x.Apply(ev); err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
	if err := x.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestIndexerTieredMatches(t *testing.T) {
	x := New()
	mustApplyIndexer(t, x,
		// w1: device 1..2, host holds 1..4, disk holds 1..6.
		onTier(kv.TierDevice, storedRoot(w1, chain(1, 1, 2)...)),
		onTier(kv.TierHostPinned, storedRoot(w1, chain(1, 1, 2, 3, 4)...)),
		onTier(kv.TierDisk, storedRoot(w1, chain(1, 1, 2, 3, 4, 5, 6)...)),
		// w2: device 1..3, host 1..2 (already covered), disk 1..5.
		onTier(kv.TierDevice, storedRoot(w2, chain(2, 1, 2, 3)...)),
		onTier(kv.TierHostPinned, storedRoot(w2, chain(2, 1, 2)...)),
		onTier(kv.TierDisk, storedRoot(w2, chain(2, 1, 2, 3, 4, 5)...)),
		// w3: nothing on device, host 1..2.
		onTier(kv.TierHostPinned, storedRoot(w3, chain(3, 1, 2)...)),
		// External blocks continue device+host+disk in the disk bucket
		// (Dynamo scores External with the disk weight).
		onTier(kv.TierExternal, storedRoot(w1r1, chain(4, 1, 2, 3)...)),
		onTier(kv.TierExternal, storedRoot(w1, chain(1, 1, 2, 3, 4, 5, 6, 7)...)),
	)
	got := x.FindMatches(locals(1, 2, 3, 4, 5, 6, 7))
	want := TieredMatches{
		w1:   {Device: 2, Host: 2, Disk: 3, TreeSize: 2},
		w2:   {Device: 3, Host: 0, Disk: 2, TreeSize: 3},
		w3:   {Device: 0, Host: 2, Disk: 0, TreeSize: 0},
		w1r1: {Device: 0, Host: 0, Disk: 3, TreeSize: 0},
	}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	// Into a reused map holding another prompt's answer: the same.
	stale := TieredMatches{w3: {Device: 9}, kv.WorkerWithDpRank{WorkerID: 99}: {Device: 1}}
	if again := x.FindMatchesInto(stale, locals(1, 2, 3, 4, 5, 6, 7)); !maps.Equal(again, want) {
		t.Fatalf("into a reused map: got %v\nwant %v", again, want)
	}
	if x.Len() != 5 || x.Tier(kv.TierExternal).Len() != 10 || x.Tier(kv.NumTiers) != nil {
		t.Fatalf("len %d external %d", x.Len(), x.Tier(kv.TierExternal).Len())
	}
	if got := x.WorkerBlockCounts(); !maps.Equal(got, map[kv.WorkerWithDpRank]uint64{w1: 2, w2: 3}) {
		t.Fatalf("device counts %v", got)
	}
}

func TestIndexerRoutingAndAggregates(t *testing.T) {
	x := New()
	mustApplyIndexer(t, x,
		onTier(kv.TierDevice, storedRoot(w1, chain(1, 1, 2)...)),
		onTier(kv.TierDisk, storedRoot(w1, chain(1, 1)...)),
	)
	err := x.Apply(onTier(kv.TierDisk, removed(w1, 1002)))
	if !errors.Is(err, ErrBlockNotFound) {
		t.Fatalf("removal of a device block on the disk tier: %v", err)
	}
	if err := x.Apply(onTier(9, storedRoot(w1, chain(1, 1)...))); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("unknown tier: %v", err)
	}
	if err := x.Apply(nil); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("nil event: %v", err)
	}
	c := x.Counters()
	if c.StoredBlocks != 3 || c.RemoveUnknown != 1 || c.InvalidEvent != 2 || c.EventsApplied != 2 {
		t.Fatalf("aggregated counters %+v", c)
	}
	if m := x.CounterMap(); m["stored_blocks"] != 3 || len(m) != len(Counters{}.Map()) {
		t.Fatalf("counter map %v", m)
	}

	x.RemoveWorker(1)
	if x.Len() != 0 || x.Tier(kv.TierDisk).Len() != 0 {
		t.Fatal("RemoveWorker left blocks on some tier")
	}
}

func TestIndexerDumpRoundTrip(t *testing.T) {
	x := New()
	mustApplyIndexer(t, x,
		onTier(kv.TierDevice, storedRoot(w1, chain(1, 1, 2)...)),
		onTier(kv.TierHostPinned, storedRoot(w1, chain(1, 1, 2, 3)...)),
		onTier(kv.TierDisk, storedRoot(w2, chain(2, 7)...)),
	)
	// The same blocks on another tier are different content.
	moved := New()
	mustApplyIndexer(t, moved,
		onTier(kv.TierDevice, storedRoot(w1, chain(1, 1, 2)...)),
		onTier(kv.TierDisk, storedRoot(w1, chain(1, 1, 2, 3)...)),
		onTier(kv.TierDisk, storedRoot(w2, chain(2, 7)...)),
	)
	if x.Digest() == moved.Digest() {
		t.Fatal("digest ignores tiers")
	}
	dump := x.Dump()
	y := New()
	for i := range dump {
		if dump[i].EventID != uint64(i) {
			t.Fatalf("event ids not sequential at %d", i)
		}
		mustApplyIndexer(t, y, &dump[i])
	}
	if y.Digest() != x.Digest() || len(dump) != 6 {
		t.Fatalf("rebuilt indexer differs (%d events)", len(dump))
	}
}
