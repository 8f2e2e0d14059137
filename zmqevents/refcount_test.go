package zmqevents

import (
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func TestRefCounter(t *testing.T) {
	w := kv.WorkerWithDpRank{WorkerID: 1}
	w2 := kv.WorkerWithDpRank{WorkerID: 1, DpRank: 1}
	blocks := func(hs ...kv.ExternalBlockHash) []kv.StoredBlock {
		out := make([]kv.StoredBlock, len(hs))
		for i, h := range hs {
			out[i] = kv.StoredBlock{BlockHash: h, TokensHash: kv.LocalBlockHash(h * 10)}
		}
		return out
	}
	stored := func(w kv.WorkerWithDpRank, hs ...kv.ExternalBlockHash) kv.Event {
		return kv.Event{Worker: w, Kind: kv.EventStored, Blocks: blocks(hs...)}
	}
	removed := func(w kv.WorkerWithDpRank, hs ...kv.ExternalBlockHash) kv.Event {
		return kv.Event{Worker: w, Kind: kv.EventRemoved, Removed: hs}
	}
	tests := []struct {
		name string
		in   []kv.Event
		want []kv.Event // everything emitted, in order
	}{
		{
			name: "second copy absorbed, first removal absorbed, last forwarded",
			in:   []kv.Event{stored(w, 1, 2), stored(w, 1, 2), removed(w, 2), removed(w, 2)},
			want: []kv.Event{stored(w, 1, 2), removed(w, 2)},
		},
		{
			name: "duplicate in the middle splits the chain",
			in:   []kv.Event{stored(w, 2), stored(w, 1, 2, 3, 4)},
			want: []kv.Event{stored(w, 2), stored(w, 1),
				{Worker: w, Kind: kv.EventStored, HasParent: true, ParentHash: 2, Blocks: blocks(3, 4)}},
		},
		{
			name: "ranks and tiers are separate copies",
			in: []kv.Event{stored(w, 1), stored(w2, 1),
				{Worker: w, Kind: kv.EventStored, Tier: kv.TierHostPinned, Blocks: blocks(1)}, removed(w2, 1)},
			want: []kv.Event{stored(w, 1), stored(w2, 1),
				{Worker: w, Kind: kv.EventStored, Tier: kv.TierHostPinned, Blocks: blocks(1)}, removed(w2, 1)},
		},
		{
			name: "unknown removal is forwarded for the index to count",
			in:   []kv.Event{removed(w, 9)},
			want: []kv.Event{removed(w, 9)},
		},
		{
			// A rank's Cleared forgets that rank only: rank 1 still
			// holds its copy, so its second store is a duplicate.
			name: "cleared forgets only its own rank on that tier",
			in: []kv.Event{stored(w, 1), stored(w2, 1), {Worker: w, Kind: kv.EventCleared},
				stored(w, 1), stored(w2, 1)},
			want: []kv.Event{stored(w, 1), stored(w2, 1), {Worker: w, Kind: kv.EventCleared},
				stored(w, 1)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewRefCounter()
			var got []kv.Event
			for i := range tt.in {
				got = c.Filter(&tt.in[i], got)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
