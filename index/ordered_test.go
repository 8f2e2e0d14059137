package index

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// AppendMatches answers what FindMatches does, in rank order, whatever
// ranks came and went (the order is rebuilt lazily), in both of its
// device-only strategies (a few matches sorted, many swept) and with
// lower tiers merged.
func TestAppendMatchesIsFindMatchesInRankOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	x := New()
	var dst []RankMatch
	queries := [][]kv.LocalBlockHash{locals(0), locals(0, 1), locals(1, 2, 0), locals(2, 2, 2, 2), locals(0, 1, 2, 0, 1)}
	check := func(step int) {
		t.Helper()
		for _, q := range queries {
			want := x.FindMatches(q)
			dst = x.AppendMatches(dst[:0], q)
			if len(dst) != len(want) || !slices.IsSortedFunc(dst, compareRankMatches) {
				t.Fatalf("step %d, query %v: %d ranks %v, want %d in rank order", step, q, len(dst), dst, len(want))
			}
			for _, m := range dst {
				if w, ok := want[m.Rank]; !ok || w != m.TierMatch {
					t.Fatalf("step %d, query %v: rank %s got %+v, want %+v (%v)", step, q, m.Rank, m.TierMatch, w, ok)
				}
			}
		}
	}
	for step := range 4000 {
		ev := randomEventForIndexer(rng, x)
		_ = x.Apply(ev) // rejections are part of the random stream
		if rng.IntN(200) == 0 {
			x.RemoveWorker(kv.WorkerID(rng.IntN(40)))
		}
		check(step)
	}
}

// randomEventForIndexer is a device-tier random event over many ranks (so
// the sweep path runs), now and then on a lower tier.
func randomEventForIndexer(rng *rand.Rand, x *Indexer) *kv.Event {
	tier := kv.TierDevice
	if rng.IntN(20) == 0 {
		tier = kv.TierHostPinned
	}
	ev := randomEvent(rng, x.Tier(tier))
	if ev == nil { // randomEvent's stand-in for a RemoveWorker
		return &kv.Event{Worker: rank(kv.WorkerID(rng.IntN(40)), 0), Kind: kv.EventCleared}
	}
	ev.Worker.WorkerID = kv.WorkerID(rng.IntN(40))
	ev.Tier = tier
	return ev
}
