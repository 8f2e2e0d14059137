package index

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// randomEvent draws an event from a deliberately tiny space of workers,
// ranks, local hashes and engine hashes, so that conflicts (unknown
// parents, re-keys, moved hashes, self-references, double removals) are
// frequent.
func randomEvent(rng *rand.Rand, tr *Tree) *kv.Event {
	r := rank(kv.WorkerID(rng.IntN(4)), uint32(rng.IntN(2)))
	extHash := func() uint64 { return uint64(rng.IntN(60)) }
	// Half the time reuse an engine hash the rank really has, so parents
	// and removals usually hit.
	known := func() (uint64, bool) {
		id, ok := tr.ids[r]
		if !ok || tr.ranks[id].blocks.len() == 0 {
			return 0, false
		}
		k := rng.IntN(tr.ranks[id].blocks.len())
		var pick uint64
		tr.ranks[id].blocks.t.Each(func(h kv.ExternalBlockHash, _ *nodeRef) {
			if k == 0 {
				pick = uint64(h)
			}
			k--
		})
		return pick, true
	}
	switch p := rng.IntN(100); {
	case p < 55:
		ev := &kv.Event{Worker: r, Kind: kv.EventStored}
		if rng.IntN(3) > 0 {
			if h, ok := known(); ok {
				ev.HasParent, ev.ParentHash = true, kv.ExternalBlockHash(h)
			} else if rng.IntN(4) == 0 {
				ev.HasParent, ev.ParentHash = true, kv.ExternalBlockHash(extHash())
			}
		}
		for range 1 + rng.IntN(5) {
			ev.Blocks = append(ev.Blocks, blk(extHash(), uint64(rng.IntN(3))))
		}
		return ev
	case p < 90:
		ev := &kv.Event{Worker: r, Kind: kv.EventRemoved}
		for range 1 + rng.IntN(3) {
			h, ok := known()
			if !ok || rng.IntN(5) == 0 {
				h = extHash()
			}
			ev.Removed = append(ev.Removed, kv.ExternalBlockHash(h))
		}
		return ev
	case p < 94:
		return &kv.Event{Worker: r, Kind: kv.EventCleared}
	case p < 97:
		return &kv.Event{Worker: r, Kind: kv.EventKind(rng.IntN(8))}
	default:
		return nil // RemoveWorker
	}
}

// TestRandomEventsKeepInvariants applies thousands of random, often
// contradictory events and checks the tree after every batch, plus that a
// dump rebuilds the same content. The same events go to a tree per fan
// setting, which must stay identical in content to the default one.
func TestRandomEventsKeepInvariants(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 99))
		trees := make([]*Tree, len(fanSettings))
		for i, fs := range fanSettings {
			trees[i] = newFanTree(fs.build, fs.drop)
		}
		tr := trees[0]
		for batch := range 150 {
			for range 20 {
				ev := randomEvent(rng, tr)
				w := kv.WorkerID(rng.IntN(5))
				for _, x := range trees {
					if ev == nil {
						x.RemoveWorker(w)
					} else if err := x.Apply(ev); err != nil && ErrorReason(err) == "error" {
						t.Fatalf("seed %d: untyped error %v", seed, err)
					}
				}
			}
			for i, x := range trees {
				if err := x.CheckInvariants(); err != nil {
					t.Fatalf("seed %d batch %d %s: %v", seed, batch, fanSettings[i].name, err)
				}
				if i > 0 {
					assertSameContent(t, fanSettings[i].name, tr, x)
				}
			}
			if batch%25 == 0 {
				assertRebuildEqual(t, tr)
			}
		}
		c := tr.Counters()
		if c.StoredBlocks == 0 || c.RemovedBlocks == 0 || c.ParentNotFound == 0 ||
			c.Rekeyed+c.Moved == 0 || c.InvalidSequence == 0 || c.RemoveUnknown == 0 {
			t.Fatalf("seed %d: random events did not reach every path: %+v", seed, c)
		}
	}
}

func assertRebuildEqual(t *testing.T, tr *Tree) {
	t.Helper()
	re := NewTree()
	for _, ev := range tr.Dump() {
		if err := re.Apply(&ev); err != nil {
			t.Fatalf("replaying dump: %v", err)
		}
	}
	if re.Digest() != tr.Digest() || re.Len() != tr.Len() || re.Nodes() != tr.Nodes() {
		t.Fatalf("rebuilt tree differs: len %d/%d nodes %d/%d", re.Len(), tr.Len(), re.Nodes(), tr.Nodes())
	}
	if err := re.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestApplyNeverPanicsOnErrorPaths(t *testing.T) {
	tr := NewTree()
	long := make([]kv.StoredBlock, 100)
	for i := range long {
		long[i] = blk(uint64(i+1), uint64(i))
	}
	long[99].BlockHash = long[40].BlockHash
	if err := tr.Apply(storedRoot(w1, long...)); !errors.Is(err, ErrInvalidBlockSequence) {
		t.Fatalf("long self-referencing chain: %v", err)
	}
	if tr.Len() != 0 {
		t.Fatal("rejected chain left blocks behind")
	}
	long[99].BlockHash = 1000
	mustApply(t, tr, storedRoot(w1, long...))
	if got := scoresOf(tr, 0, 1, 2); got[w1] != 3 {
		t.Fatalf("scores %v", got)
	}
}

// assertSameContent fails unless two trees fed the same input hold the same
// entries and counted the same things.
func assertSameContent(t *testing.T, name string, want, got *Tree) {
	t.Helper()
	if got.Digest() != want.Digest() || got.Len() != want.Len() || got.Nodes() != want.Nodes() || got.Counters() != want.Counters() {
		t.Fatalf("%s differs from the default tree: len %d/%d nodes %d/%d counters %+v/%+v",
			name, got.Len(), want.Len(), got.Nodes(), want.Nodes(), got.Counters(), want.Counters())
	}
}
