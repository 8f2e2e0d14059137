package bench

import (
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// Every event comes back as it went in, including lists that cross into
// a new chunk, a list longer than a chunk, empty removals and clears, and
// loading into a scratch event that held a longer list before.
func TestEventStoreRoundTrip(t *testing.T) {
	mk := func(n int, base uint64) []kv.StoredBlock {
		out := make([]kv.StoredBlock, n)
		for i := range out {
			out[i] = kv.StoredBlock{BlockHash: kv.ExternalBlockHash(base + uint64(i)), TokensHash: kv.LocalBlockHash(^(base + uint64(i)))}
		}
		return out
	}
	names := func(n int, base uint64) []kv.ExternalBlockHash {
		out := make([]kv.ExternalBlockHash, n)
		for i := range out {
			out[i] = kv.ExternalBlockHash(base + uint64(i))
		}
		return out
	}
	in := []kv.Event{
		{Worker: kv.WorkerWithDpRank{WorkerID: 1}, EventID: 1, Kind: kv.EventStored, Blocks: mk(3, 10)},
		{Worker: kv.WorkerWithDpRank{WorkerID: 2, DpRank: 3}, EventID: 2, Kind: kv.EventStored, HasParent: true, ParentHash: 12, Blocks: mk(chunkLen-2, 100), Tier: kv.TierHostPinned},
		{Worker: kv.WorkerWithDpRank{WorkerID: 1}, EventID: 3, Kind: kv.EventRemoved, Removed: names(5, 10)},
		{Worker: kv.WorkerWithDpRank{WorkerID: 4}, EventID: 4, Kind: kv.EventStored, Blocks: mk(chunkLen+7, 1<<40)},
		{Worker: kv.WorkerWithDpRank{WorkerID: 5}, EventID: 5, Kind: kv.EventRemoved},
		{Worker: kv.WorkerWithDpRank{WorkerID: 6}, EventID: 6, Kind: kv.EventCleared},
		{Worker: kv.WorkerWithDpRank{WorkerID: 1}, EventID: 7, Kind: kv.EventStored, Blocks: mk(1, 7)},
	}
	var s eventStore
	for i := range in {
		if got := s.add(&in[i]); got != i {
			t.Fatalf("event %d stored at %d", i, got)
		}
	}
	var scratch kv.Event
	for _, order := range [][]int{{0, 1, 2, 3, 4, 5, 6}, {3, 6, 1, 5, 0, 4, 2}} {
		for _, i := range order {
			got := s.load(i, &scratch)
			want := in[i]
			if len(want.Blocks) == 0 {
				want.Blocks = nil
			}
			if len(want.Removed) == 0 {
				want.Removed = nil
			}
			if len(got.Blocks) == 0 {
				got.Blocks = nil
			}
			if len(got.Removed) == 0 {
				got.Removed = nil
			}
			if !reflect.DeepEqual(*got, want) {
				t.Fatalf("event %d: got %+v (%d blocks), want %+v (%d blocks)", i, got.Worker, len(got.Blocks), want.Worker, len(want.Blocks))
			}
		}
	}
	// A loaded list cannot be appended into the next event's blocks.
	ev := s.load(0, &scratch)
	if cap(ev.Blocks) != len(ev.Blocks) {
		t.Fatalf("a loaded list has capacity %d past its %d blocks", cap(ev.Blocks), len(ev.Blocks))
	}
}
