package index

import (
	"maps"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func TestSharedTierIsNoWorkersOverlap(t *testing.T) {
	x := New()
	store, w1, w2 := rank(900, 0), rank(1, 0), rank(2, 0)
	mustApplyIndexer(t, x,
		onTier(kv.TierDevice, storedRoot(w1, chain(1, 1, 2)...)),
		onTier(kv.TierDevice, storedRoot(w2, chain(2, 1, 2, 3, 4, 5, 6)...)),
		// The store holds 1..8; w1 itself published 1..3 to the shared tier.
		onTier(kv.TierShared, storedRoot(store, chain(9, 1, 2, 3, 4, 5, 6, 7, 8)...)),
		onTier(kv.TierShared, storedRoot(w1, chain(1, 1, 2, 3)...)),
	)
	prompt := locals(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	got := x.FindMatches(prompt)
	want := TieredMatches{w1: {Device: 2, TreeSize: 2}, w2: {Device: 6, TreeSize: 6}}
	if !maps.Equal(got, want) {
		t.Fatalf("device matches %v, want %v (the shared tier must not enter them)", got, want)
	}
	if d := x.SharedPrefix(prompt); d != 8 {
		t.Fatalf("shared prefix %d, want 8", d)
	}
	// A prompt diverging at block 4 shares only 1..3.
	if d := x.SharedPrefix(locals(1, 2, 3, 77, 5)); d != 3 {
		t.Fatalf("diverging shared prefix %d, want 3", d)
	}
	if d := x.SharedPrefix(locals(77)); d != 0 {
		t.Fatalf("unrelated prompt shared prefix %d, want 0", d)
	}

	// The store evicts 6..8 (its children go with block 6): 5 left.
	mustApplyIndexer(t, x, onTier(kv.TierShared, removed(store, 9006, 9007, 9008)))
	if d := x.SharedPrefix(prompt); d != 5 {
		t.Fatalf("after eviction shared prefix %d, want 5", d)
	}
	// The store clears: w1's shared 1..3 remain.
	mustApplyIndexer(t, x, onTier(kv.TierShared, cleared(store)))
	if d := x.SharedPrefix(prompt); d != 3 {
		t.Fatalf("after the store's clear shared prefix %d, want 3", d)
	}
	// Removing w1 drops its shared blocks too.
	x.RemoveWorker(1)
	if d := x.SharedPrefix(prompt); d != 0 {
		t.Fatalf("after removing w1 shared prefix %d, want 0", d)
	}
	if err := x.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// The shared tier survives a snapshot: Dump tags its events, which
// rebuild the same index.
func TestSharedTierDumpRebuilds(t *testing.T) {
	x := New()
	mustApplyIndexer(t, x,
		onTier(kv.TierShared, storedRoot(rank(900, 0), chain(9, 1, 2, 3)...)),
		onTier(kv.TierDevice, storedRoot(rank(1, 0), chain(1, 1)...)),
	)
	y := New()
	for _, ev := range x.Dump() {
		if err := y.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	if y.Digest() != x.Digest() || y.SharedPrefix(locals(1, 2, 3)) != 3 {
		t.Fatalf("rebuilt digest %x vs %x, shared prefix %d", y.Digest(), x.Digest(), y.SharedPrefix(locals(1, 2, 3)))
	}
}

func TestSharedStores(t *testing.T) {
	s, err := ParseSharedStores([]string{"900, 901", "", "18446744073709551615"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Holds(900) || !s.Holds(901) || !s.Holds(^kv.WorkerID(0)) || s.Holds(1) || len(s) != 3 {
		t.Fatalf("stores %v", s)
	}
	for _, bad := range []string{"x", "-1", "1.5", "18446744073709551616"} {
		if _, err := ParseSharedStores([]string{bad}); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}

	dev := &kv.Event{Worker: rank(900, 1), Kind: kv.EventCleared, Tier: kv.TierDevice}
	got := s.Classify(dev)
	if got == dev || got.Tier != kv.TierShared || dev.Tier != kv.TierDevice || got.Worker != dev.Worker {
		t.Fatalf("store event classified %+v (original %+v)", got, dev)
	}
	other := &kv.Event{Worker: rank(1, 0), Kind: kv.EventCleared, Tier: kv.TierHostPinned}
	if s.Classify(other) != other {
		t.Fatal("a worker's event was changed")
	}
	var none SharedStores
	if none.Holds(900) || none.Classify(dev) != dev || s.Classify(nil) != nil {
		t.Fatal("empty set classified an event")
	}
}
