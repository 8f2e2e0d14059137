package decide

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
	want := map[kv.WorkerWithDpRank]OverlapRow{}
	var set OverlapSet
	set.Reset(shards)
	var all []kv.WorkerWithDpRank
	for sh := range shards {
		matches := map[kv.WorkerWithDpRank]index.TierMatch{}
		predicted := map[kv.WorkerWithDpRank]uint32{}
		for id := uint64(1); id <= 300; id++ {
			if int(id%shards) != sh { // a worker lives on one shard
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
				row := OverlapRow{Device: m.Device, Host: m.Host, Disk: m.Disk, Tree: m.TreeSize}
				if rng.IntN(5) == 0 {
					predicted[w] = m.Device / 2
					row.Predicted, row.Confirmed = true, m.Device/2
				}
				want[w] = row
			}
		}
		packed, _ := PackOverlaps(matches, predicted, nil)
		set.Add(packed)
	}
	check := func(how string, ranks []kv.WorkerWithDpRank, get func(kv.WorkerWithDpRank) (OverlapRow, bool)) {
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
	check("in rank order", all, set.Next)
	check("again (the walk restarts)", all, set.Next)
	check("every third", everyThird(all), set.Next)
	shuffled := append([]kv.WorkerWithDpRank(nil), all...)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	check("shuffled", shuffled, set.Next)
	check("by lookup", shuffled, set.Find)
	check("unknown ranks", []kv.WorkerWithDpRank{{WorkerID: 999}, {WorkerID: 5, DpRank: 9}}, set.Find)

	// The overlap-scores answer: every rank in order, zeros where nothing.
	every := set.Every(all)
	if len(every.WorkerIds) != len(all) {
		t.Fatalf("every: %d rows for %d ranks", len(every.WorkerIds), len(all))
	}
	var fromEvery OverlapSet
	fromEvery.Reset(1)
	fromEvery.Add(every)
	check("every", all, func(w kv.WorkerWithDpRank) (OverlapRow, bool) {
		row, ok := fromEvery.Next(w)
		if !ok {
			return row, false
		}
		_, held := want[w]
		return row, held || row != (OverlapRow{Tree: row.Tree}) // a zero row stands for no match
	})
}

// A reply whose arrays do not line up is ignored, not indexed past.
func TestOverlapSetIgnoresMisshapenReplies(t *testing.T) {
	var set OverlapSet
	set.Reset(1)
	r, _ := PackOverlaps(map[kv.WorkerWithDpRank]index.TierMatch{{WorkerID: 1}: {Device: 3}}, nil, nil)
	r.DiskBlocks = nil
	set.Add(r)
	if _, ok := set.Next(kv.WorkerWithDpRank{WorkerID: 1}); ok {
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
