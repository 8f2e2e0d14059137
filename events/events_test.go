package events

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func TestDecodeRouterEventJSON(t *testing.T) {
	w1 := kv.WorkerWithDpRank{WorkerID: 123}
	tests := []struct {
		name string
		in   string
		want kv.Event
		err  string
	}{
		{"stored with parent", `{"worker_id":123,"storage_tier":"device","event":{"event_id":42,"dp_rank":0,"data":{"stored":{"parent_hash":987,"start_position":null,"blocks":[{"block_hash":111,"tokens_hash":222,"mm_extra_info":null}]}}}}`,
			kv.Event{Worker: w1, EventID: 42, Kind: kv.EventStored, HasParent: true, ParentHash: 987,
				Blocks: []kv.StoredBlock{{BlockHash: 111, TokensHash: 222}}}, ""},
		{"stored null parent, no tier, no dp_rank", `{"worker_id":123,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}`,
			kv.Event{Worker: w1, EventID: 1, Kind: kv.EventStored, Blocks: []kv.StoredBlock{{BlockHash: 1, TokensHash: 2}}}, ""},
		{"negative i64 hashes are reinterpreted", `{"worker_id":123,"event":{"event_id":1,"data":{"stored":{"parent_hash":-1,"blocks":[{"block_hash":-2,"tokens_hash":18446744073709551615}]}}}}`,
			kv.Event{Worker: w1, EventID: 1, Kind: kv.EventStored, HasParent: true, ParentHash: kv.ExternalBlockHash(^uint64(0)),
				Blocks: []kv.StoredBlock{{BlockHash: kv.ExternalBlockHash(^uint64(0) - 1), TokensHash: kv.LocalBlockHash(^uint64(0))}}}, ""},
		{"removed on dp rank 3, host tier", `{"worker_id":123,"storage_tier":"host_pinned","event":{"event_id":5,"dp_rank":3,"data":{"removed":{"block_hashes":[111,112]}}}}`,
			kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 123, DpRank: 3}, EventID: 5, Tier: kv.TierHostPinned, Kind: kv.EventRemoved,
				Removed: []kv.ExternalBlockHash{111, 112}}, ""},
		{"cleared as a string", `{"worker_id":123,"event":{"event_id":9,"dp_rank":1,"data":"cleared"}}`,
			kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 123, DpRank: 1}, EventID: 9, Kind: kv.EventCleared}, ""},
		{"cleared as an object, unknown fields ignored", `{"worker_id":123,"extra":true,"event":{"event_id":9,"data":{"cleared":{}},"more":1}}`,
			kv.Event{Worker: w1, EventID: 9, Kind: kv.EventCleared}, ""},
		{"missing worker", `{"event":{"event_id":1,"data":"cleared"}}`, kv.Event{}, "worker_id is required"},
		{"missing event", `{"worker_id":1}`, kv.Event{}, "event is required"},
		{"missing data", `{"worker_id":1,"event":{"event_id":1}}`, kv.Event{}, "event.data is required"},
		{"stored without blocks", `{"worker_id":1,"event":{"data":{"stored":{"blocks":[]}}}}`, kv.Event{}, "has no blocks"},
		{"block without tokens_hash", `{"worker_id":1,"event":{"data":{"stored":{"blocks":[{"block_hash":1}]}}}}`, kv.Event{}, "blocks[0]"},
		{"float hash", `{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[1.5]}}}}`, kv.Event{}, "not a 64-bit integer"},
		{"huge hash", `{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[1e99]}}}}`, kv.Event{}, "not a 64-bit integer"},
		{"unknown tier", `{"worker_id":1,"storage_tier":"tape","event":{"data":"cleared"}}`, kv.Event{}, "storage_tier"},
		{"unknown kind", `{"worker_id":1,"event":{"data":{"evicted":{}}}}`, kv.Event{}, "unknown event"},
		{"two kinds", `{"worker_id":1,"event":{"data":{"cleared":{},"removed":{"block_hashes":[]}}}}`, kv.Event{}, "exactly one"},
		{"dp rank overflow", `{"worker_id":1,"event":{"dp_rank":4294967296,"data":"cleared"}}`, kv.Event{}, "dp_rank"},
		{"not JSON", "\x00\xff", kv.Event{}, "router event JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeRouterEventJSON([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrMalformed) {
					t.Fatalf("err = %v, want ErrMalformed containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestRoundTrips(t *testing.T) {
	evs := []kv.Event{
		{Worker: kv.WorkerWithDpRank{WorkerID: 1 << 63, DpRank: 2}, EventID: 7, Kind: kv.EventStored, HasParent: true, ParentHash: 5,
			Blocks: []kv.StoredBlock{{BlockHash: 1, TokensHash: 2}, {BlockHash: 3, TokensHash: 4}}},
		{Worker: kv.WorkerWithDpRank{WorkerID: 9}, Tier: kv.TierDisk, Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{^kv.ExternalBlockHash(0)}},
		{Worker: kv.WorkerWithDpRank{WorkerID: 9}, EventID: 1, Kind: kv.EventCleared},
	}
	for _, ev := range evs {
		data, err := EncodeRouterEventJSON(&ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRouterEventJSON(data)
		if err != nil || !reflect.DeepEqual(got, ev) {
			t.Fatalf("JSON round trip of %+v: got %+v, %v (wire %s)", ev, got, err, data)
		}
	}
	data, err := EncodeProtoBatch(evs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeProto(data)
	if err != nil || !reflect.DeepEqual(got, evs) {
		t.Fatalf("protobuf round trip: %+v %v", got, err)
	}
	batch, err := DecodeRouterEventsJSON([]byte(`[` + mustJSON(t, &evs[0]) + `,` + mustJSON(t, &evs[2]) + `]`))
	if err != nil || len(batch) != 2 || !reflect.DeepEqual(batch[1], evs[2]) {
		t.Fatalf("JSON batch: %+v %v", batch, err)
	}
	if _, err := EncodeRouterEventJSON(&kv.Event{Kind: kv.EventStored}); err == nil {
		t.Fatal("encoding an invalid event must fail")
	}
}

func mustJSON(t *testing.T, ev *kv.Event) string {
	data, err := EncodeRouterEventJSON(ev)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestDecodeProtoRejectsGarbage(t *testing.T) {
	for _, in := range [][]byte{{0xff, 0xff, 0xff}, {0x0a, 0x05, 0x12}} {
		if _, err := DecodeProto(in); !errors.Is(err, ErrMalformed) {
			t.Errorf("%x: err = %v, want ErrMalformed", in, err)
		}
	}
	// An event without a worker or data is malformed even if it parses.
	data, _ := EncodeProtoBatch(nil)
	if evs, err := DecodeProto(data); err != nil || len(evs) != 0 {
		t.Errorf("empty batch: %v %v", evs, err)
	}
}

func TestDecodeHeartbeat(t *testing.T) {
	hb, err := DecodeHeartbeat([]byte(`{"worker_id":7,"url":"http://h:1","block_size":16,"max_num_batched_tokens":4096,"unknown":1}`))
	if err != nil || hb.WorkerID != 7 || hb.DataParallelSize != 1 || hb.MaxNumBatchedTokens != 4096 {
		t.Fatalf("got %+v %v", hb, err)
	}
	for _, bad := range []string{`{}`, `{"worker_id":"7"}`, `{"worker_id":7,"data_parallel_size":0}`,
		`{"worker_id":7,"data_parallel_size":100000}`, `[`, `{"worker_id":-1}`} {
		if _, err := DecodeHeartbeat([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", bad, err)
		}
	}
	data, _ := EncodeHeartbeat(hb)
	again, err := DecodeHeartbeat(data)
	if err != nil || again != hb {
		t.Fatalf("heartbeat round trip: %+v %v", again, err)
	}
}
