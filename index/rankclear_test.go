package index

import (
	"errors"
	"maps"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// The rule under test is Dynamo's (lib/kv-router, the concurrent radix
// tree's apply_event): KvCacheEventData::Cleared calls
// remove_worker_dp_rank(worker_id, dp_rank), so a clear empties the
// (worker, dp_rank) that sent it and no other rank of the worker. Every
// dp rank is an engine core with its own cache that resets and restarts
// on its own.

// A dp=3 worker: every rank holds the same three blocks of content under
// its own engine names (rank r names block l as (10+r)*1000+l).
var (
	dp0, dp1, dp2 = rank(40, 0), rank(40, 1), rank(40, 2)
	dpRanks       = []kv.WorkerWithDpRank{dp0, dp1, dp2}
)

func dpFill() []*kv.Event {
	var evs []*kv.Event
	for i, r := range dpRanks {
		evs = append(evs, storedRoot(r, chain(uint64(10+i), 1, 2, 3)...))
	}
	return evs
}

// step is one event of a scenario and the error it must get (nil: applied).
type step struct {
	ev      *kv.Event
	wantErr error
}

func ok(ev *kv.Event) step { return step{ev: ev} }

func TestClearedIsScopedToItsRank(t *testing.T) {
	type scores = map[kv.WorkerWithDpRank]uint32
	tests := []struct {
		name   string
		steps  []step
		query  []uint64
		want   scores
		blocks map[kv.WorkerWithDpRank]uint64
	}{
		{
			name:   "clearing rank 1 leaves ranks 0 and 2",
			steps:  []step{ok(cleared(dp1))},
			query:  []uint64{1, 2, 3},
			want:   scores{dp0: 3, dp2: 3},
			blocks: map[kv.WorkerWithDpRank]uint64{dp0: 3, dp1: 0, dp2: 3},
		},
		{
			name: "ranks 0 and 2 keep storing under their parents after rank 1 cleared",
			steps: []step{
				ok(cleared(dp1)),
				ok(storedUnder(dp0, 10003, blk(10004, 4))),
				ok(storedUnder(dp2, 12003, blk(12004, 4), blk(12005, 5))),
				// Rank 1 really lost its blocks: its old parent is unknown.
				{ev: storedUnder(dp1, 11003, blk(11004, 4)), wantErr: ErrParentNotFound},
			},
			query:  []uint64{1, 2, 3, 4, 5},
			want:   scores{dp0: 4, dp2: 5},
			blocks: map[kv.WorkerWithDpRank]uint64{dp0: 4, dp1: 0, dp2: 5},
		},
		{
			name: "a cleared rank stores again from the root",
			steps: []step{
				ok(cleared(dp1)),
				ok(storedRoot(dp1, chain(21, 1, 2)...)),
				ok(storedUnder(dp1, 21002, blk(21003, 3))),
			},
			query:  []uint64{1, 2, 3},
			want:   scores{dp0: 3, dp1: 3, dp2: 3},
			blocks: map[kv.WorkerWithDpRank]uint64{dp0: 3, dp1: 3, dp2: 3},
		},
		{
			// A whole engine restarting rank by rank: each rank announces its
			// empty cache and re-stores, while the others keep serving.
			name: "a staggered whole-engine restart leaves every rank's new blocks",
			steps: []step{
				ok(cleared(dp0)),
				ok(storedRoot(dp0, chain(30, 7, 8)...)),
				ok(storedUnder(dp1, 11003, blk(11004, 4))), // rank 1 still on its old cache
				ok(cleared(dp1)),
				ok(storedRoot(dp1, chain(31, 7, 8)...)),
				ok(storedUnder(dp0, 30008, blk(30009, 9))),
				ok(storedUnder(dp2, 12003, blk(12004, 4))), // rank 2 still on its old cache
				ok(cleared(dp2)),
				ok(storedRoot(dp2, chain(32, 7, 8)...)),
			},
			query:  []uint64{7, 8, 9},
			want:   scores{dp0: 3, dp1: 2, dp2: 2},
			blocks: map[kv.WorkerWithDpRank]uint64{dp0: 3, dp1: 2, dp2: 2},
		},
		{
			name: "the whole engine restarting at once empties every rank, then each re-stores",
			steps: []step{
				ok(cleared(dp0)), ok(cleared(dp1)), ok(cleared(dp2)),
				ok(storedRoot(dp2, chain(32, 7)...)),
				ok(storedRoot(dp0, chain(30, 7)...)),
				ok(storedRoot(dp1, chain(31, 7)...)),
			},
			query:  []uint64{7},
			want:   scores{dp0: 1, dp1: 1, dp2: 1},
			blocks: map[kv.WorkerWithDpRank]uint64{dp0: 1, dp1: 1, dp2: 1},
		},
		{
			name:   "a rank the worker never used clears nothing",
			steps:  []step{ok(cleared(rank(40, 7)))},
			query:  []uint64{1, 2, 3},
			want:   scores{dp0: 3, dp1: 3, dp2: 3},
			blocks: map[kv.WorkerWithDpRank]uint64{dp0: 3, dp1: 3, dp2: 3},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTree()
			mustApply(t, tr, dpFill()...)
			for i, s := range tc.steps {
				err := tr.Apply(s.ev)
				if (s.wantErr == nil) != (err == nil) || (s.wantErr != nil && !errors.Is(err, s.wantErr)) {
					t.Fatalf("step %d (%s of %s): err %v, want %v", i, s.ev.Kind, s.ev.Worker, err, s.wantErr)
				}
				if err := tr.CheckInvariants(); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			if got := scoresOf(tr, tc.query...); !maps.Equal(got, tc.want) {
				t.Fatalf("scores %v, want %v", got, tc.want)
			}
			if got := tr.WorkerBlockCounts(); !maps.Equal(got, tc.blocks) {
				t.Fatalf("blocks %v, want %v", got, tc.blocks)
			}
		})
	}
}

// A clear empties the rank on every tier (Dynamo applies a domainless
// clear to its lower-tier indexes too), and only that rank.
func TestClearedEmptiesTheRankOnEveryTier(t *testing.T) {
	for _, named := range []kv.StorageTier{kv.TierDevice, kv.TierHostPinned, kv.TierExternal} {
		t.Run(named.String(), func(t *testing.T) {
			x := New()
			for i, r := range []kv.WorkerWithDpRank{dp0, dp1} {
				for tier := range kv.NumTiers {
					mustApplyIndexer(t, x, onTier(tier, storedRoot(r, chain(uint64(10+i), 1, 2)...)))
				}
			}
			mustApplyIndexer(t, x, onTier(named, cleared(dp1)))
			if err := x.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			for tier := range kv.NumTiers {
				got := x.Tier(tier).WorkerBlockCounts()
				want := map[kv.WorkerWithDpRank]uint64{dp0: 2, dp1: 0}
				if !maps.Equal(got, want) {
					t.Fatalf("%s tier after rank 1's clear on the %s tier: %v, want %v", tier, named, got, want)
				}
			}
			c := x.Counters()
			if c.Cleared != 1 || c.ClearedBlocks != 2*uint64(kv.NumTiers) {
				t.Fatalf("cleared %d events, %d blocks; want 1 and %d", c.Cleared, c.ClearedBlocks, 2*kv.NumTiers)
			}
		})
	}
}

// The predictions this replica made for a rank go when that rank clears;
// the worker's other ranks keep theirs.
func TestApproxClearRank(t *testing.T) {
	a := NewApprox(ApproxConfig{})
	now := t0
	for _, r := range dpRanks {
		if err := a.RecordDecision(r, locals(1, 2, 3), now); err != nil {
			t.Fatal(err)
		}
	}
	a.ClearRank(dp1)
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	got := map[kv.WorkerWithDpRank]uint32{}
	for r, m := range a.FindMatches(locals(1, 2, 3)) {
		got[r] = m.Device
	}
	if want := map[kv.WorkerWithDpRank]uint32{dp0: 3, dp2: 3}; !maps.Equal(got, want) {
		t.Fatalf("predictions after rank 1 cleared: %v, want %v", got, want)
	}
	// The cleared rank's deadlines went with it: expiring later finds
	// only the others' entries.
	if n := a.Expire(now.Add(DefaultApproxTTL + 1)); n != 6 {
		t.Fatalf("expired %d entries, want the other ranks' 6", n)
	}
}
