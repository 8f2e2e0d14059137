package main

import (
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func TestEncodeRouterEvent(t *testing.T) {
	w := kv.WorkerWithDpRank{WorkerID: 5, DpRank: 2}
	tests := []struct {
		name string
		ev   kv.Event
		want string
	}{
		{"stored under a parent", kv.Event{Worker: w, EventID: 3, Kind: kv.EventStored, HasParent: true, ParentHash: 9,
			Blocks: []kv.StoredBlock{{BlockHash: 10, TokensHash: 20}}},
			`{"worker_id":5,"storage_tier":"device","event":{"event_id":3,"dp_rank":2,"data":{"stored":{"parent_hash":9,"blocks":[{"block_hash":10,"tokens_hash":20}]}}}}`},
		{"stored at the root", kv.Event{Worker: w, Kind: kv.EventStored, Blocks: []kv.StoredBlock{{BlockHash: 1<<64 - 1, TokensHash: 2}}},
			`{"worker_id":5,"storage_tier":"device","event":{"event_id":0,"dp_rank":2,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":18446744073709551615,"tokens_hash":2}]}}}}`},
		{"removed", kv.Event{Worker: w, EventID: 4, Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{10, 11}},
			`{"worker_id":5,"storage_tier":"device","event":{"event_id":4,"dp_rank":2,"data":{"removed":{"block_hashes":[10,11]}}}}`},
		{"cleared", kv.Event{Worker: w, EventID: 5, Kind: kv.EventCleared},
			`{"worker_id":5,"storage_tier":"device","event":{"event_id":5,"dp_rank":2,"data":"cleared"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := encodeRouterEvent(&tt.ev)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	if _, err := encodeRouterEvent(&kv.Event{Kind: kv.EventStored}); err == nil {
		t.Fatal("a stored event without blocks must not encode")
	}
}
