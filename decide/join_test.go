package decide

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// Join gives the same candidates whether it finds the asked ranks' loads
// by position (the eligible list is the board's own) or by a lookup per
// rank (a narrowed or copied list): replies replace the board's
// publications, and ranks not asked keep theirs.
func TestJoinByPositionMatchesLookup(t *testing.T) {
	d, err := New(Config{Scheduling: scheduling.DefaultConfig()}, [2]uint64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	var list []kv.WorkerWithDpRank
	for id := uint64(1); id <= 16; id++ {
		list = append(list, kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id), DpRank: uint32(id % 2)})
	}
	b := d.Board()
	b.Sync(list, func(w kv.WorkerWithDpRank) (string, bool) { return w.String(), true }, func(kv.WorkerWithDpRank) {})
	now := time.Unix(100, 0)
	for i, w := range list {
		if i%5 == 4 {
			continue // never published
		}
		b.Apply(&messages.RankLoad{Worker: RankMsg(w), ActivePrefillTokens: uint64(100 * i), ActiveBlocks: float64(i),
			ActiveRequests: uint32(i), HeadPrefillTokens: uint64(i % 3), HeadStartedUnixNano: now.UnixNano() - int64(i)}, now.UnixNano())
	}
	loads := map[kv.WorkerWithDpRank]*messages.LoadReply{}
	for _, i := range []int{1, 4, 7, 12} {
		w := list[i]
		loads[w] = &messages.LoadReply{Worker: RankMsg(w), ActivePrefillTokens: 7, ActiveBlocks: 3.5, NewBlocks: uint64(i),
			ActiveRequests: 2, HeadPrefillTokens: 9, HeadPrefillElapsedNanos: 11, PrefillTokensPerSec: 13}
	}
	ranks := &Ranks{List: list, Capacity: map[kv.WorkerWithDpRank]uint64{list[3]: 500}}
	var o OverlapSet
	o.Reset(0)
	byPosition := slices.Clone(d.Join(list, ranks, &o, loads, 20, 0, now))
	byLookup := d.Join(slices.Clone(list), ranks, &o, loads, 20, 0, now)
	if !reflect.DeepEqual(byPosition, byLookup) {
		t.Fatalf("by position:\n%+v\nby lookup:\n%+v", byPosition, byLookup)
	}
	if c := byPosition[7]; c.NewBlocks != 7 || c.ActivePrefixBlocks != 13 || c.PrefillTokensPerSec != 13 {
		t.Fatalf("asked rank's candidate %+v: not its reply", c)
	}
	if c := byPosition[2]; c.ActivePrefillTokens != 200 || c.NewBlocks != 20 {
		t.Fatalf("unasked rank's candidate %+v: not its publication", c)
	}
	if byPosition[3].CapacityBlocks != 500 {
		t.Fatalf("capacity not joined: %+v", byPosition[3])
	}
}
