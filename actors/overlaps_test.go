package actors

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/kv"
)

// The packed replies answer every rank as a map of the same matches does:
// walked in rank order, walked in any order, and looked up one at a time,
// with predicted rows and their confirmed depth kept.
func TestOverlapSetMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const shards = 3
	want := map[kv.WorkerWithDpRank]overlapRow{}
	var set overlapSet
	set.reset(shards)
	var all []kv.WorkerWithDpRank
	for sh := range shards {
		matches := map[kv.WorkerWithDpRank]index.TierMatch{}
		predicted := map[kv.WorkerWithDpRank]uint32{}
		for id := uint64(1); id <= 300; id++ {
			if shardOf(kv.WorkerID(id), shards) != sh {
				continue
			}
			for dp := range uint32(1 + id%3) {
				w := kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id), DpRank: dp}
				all = append(all, w)
				if rng.IntN(3) == 0 {
					continue // holds nothing of the prompt
				}
				m := index.TierMatch{Device: rng.Uint32N(100), Host: rng.Uint32N(9), Disk: rng.Uint32N(9), TreeSize: rng.Uint64N(1e6)}
				matches[w] = m
				row := overlapRow{device: m.Device, host: m.Host, disk: m.Disk, tree: m.TreeSize}
				if rng.IntN(5) == 0 {
					predicted[w] = m.Device / 2
					row.predicted, row.confirmed = true, m.Device/2
				}
				want[w] = row
			}
		}
		packed, _ := packOverlaps(matches, predicted, nil)
		set.add(packed)
	}
	check := func(how string, ranks []kv.WorkerWithDpRank, get func(kv.WorkerWithDpRank) (overlapRow, bool)) {
		t.Helper()
		for _, w := range ranks {
			got, ok := get(w)
			exp, has := want[w]
			if ok != has || got != exp {
				t.Fatalf("%s: rank %s: got %+v %v, want %+v %v", how, w, got, ok, exp, has)
			}
		}
	}
	slices.SortFunc(all, kv.CompareRanks)
	check("in rank order", all, set.next)
	check("again (the walk restarts)", all, set.next)
	check("every third", everyThird(all), set.next)
	shuffled := append([]kv.WorkerWithDpRank(nil), all...)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	check("shuffled", shuffled, set.next)
	check("by lookup", shuffled, set.find)
	check("unknown ranks", []kv.WorkerWithDpRank{{WorkerID: 999}, {WorkerID: 5, DpRank: 9}}, set.find)

	// The overlap-scores answer: every rank in order, zeros where nothing.
	every := set.every(all)
	if len(every.WorkerIds) != len(all) {
		t.Fatalf("every: %d rows for %d ranks", len(every.WorkerIds), len(all))
	}
	var fromEvery overlapSet
	fromEvery.reset(1)
	fromEvery.add(every)
	check("every", all, func(w kv.WorkerWithDpRank) (overlapRow, bool) {
		row, ok := fromEvery.next(w)
		if !ok {
			return row, false
		}
		_, held := want[w]
		return row, held || row != (overlapRow{tree: row.tree}) // a zero row stands for no match
	})
}

// A reply whose arrays do not line up is ignored, not indexed past.
func TestOverlapSetIgnoresMisshapenReplies(t *testing.T) {
	var set overlapSet
	set.reset(1)
	r, _ := packOverlaps(map[kv.WorkerWithDpRank]index.TierMatch{{WorkerID: 1}: {Device: 3}}, nil, nil)
	r.DiskBlocks = nil
	set.add(r)
	if _, ok := set.next(kv.WorkerWithDpRank{WorkerID: 1}); ok {
		t.Fatal("a misshapen reply was read")
	}
}

func everyThird(ws []kv.WorkerWithDpRank) []kv.WorkerWithDpRank {
	var out []kv.WorkerWithDpRank
	for i := 0; i < len(ws); i += 3 {
		out = append(out, ws[i])
	}
	return out
}
