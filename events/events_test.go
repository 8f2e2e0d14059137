package events

import (
	"encoding/json"
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
		{"dp_rank beside worker_id", `{"worker_id":123,"dp_rank":2,"event":{"event_id":3,"data":"cleared"}}`,
			kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 123, DpRank: 2}, EventID: 3, Kind: kv.EventCleared}, ""},
		{"dp_rank inside event wins", `{"worker_id":123,"dp_rank":2,"event":{"event_id":3,"dp_rank":5,"data":"cleared"}}`,
			kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 123, DpRank: 5}, EventID: 3, Kind: kv.EventCleared}, ""},
		{"null dp_rank inside event falls back", `{"worker_id":123,"dp_rank":2,"event":{"dp_rank":null,"data":"cleared"}}`,
			kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 123, DpRank: 2}, Kind: kv.EventCleared}, ""},
		{"removed with no hashes", `{"worker_id":123,"event":{"event_id":2,"data":{"removed":{}}}}`,
			kv.Event{Worker: w1, EventID: 2, Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{}}, ""},
		{"negative hashes in removed, min int64", `{"worker_id":123,"event":{"data":{"removed":{"block_hashes":[-9223372036854775808,-1]}}}}`,
			kv.Event{Worker: w1, Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{1 << 63, kv.ExternalBlockHash(^uint64(0))}}, ""},
		{"whitespace, escapes and nested unknown values", " \n{ \"worker_id\" : 123 , \"x\":[{\"a\":[1,2.5e-3,\"s\\u00e9\\n\"]},true,false,null],\n" +
			`"storage_tier":"dis\u006b","event":{"data":{"stored":{"blocks":[{"tokens_hash":2,"block_hash":1,"mm_extra_info":{"mm_hashes":[1]}}]}}}} `,
			kv.Event{Worker: w1, Tier: kv.TierDisk, Kind: kv.EventStored, Blocks: []kv.StoredBlock{{BlockHash: 1, TokensHash: 2}}}, ""},
		{"Dynamo capitalised variant", `{"worker_id":123,"event":{"data":{"Removed":{"block_hashes":[4]}}}}`,
			kv.Event{Worker: w1, Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{4}}, ""},

		{"missing worker", `{"event":{"event_id":1,"data":"cleared"}}`, kv.Event{}, "worker_id: required field is missing"},
		{"null worker", `{"worker_id":null,"event":{"event_id":1,"data":"cleared"}}`, kv.Event{}, "worker_id: required field is missing"},
		{"missing event", `{"worker_id":1}`, kv.Event{}, "event: required field is missing"},
		{"missing data", `{"worker_id":1,"event":{"event_id":1}}`, kv.Event{}, "event.data: required field is missing"},
		{"stored without blocks", `{"worker_id":1,"event":{"data":{"stored":{"blocks":[]}}}}`, kv.Event{}, "has no blocks"},
		{"stored with null blocks", `{"worker_id":1,"event":{"data":{"stored":{"blocks":null}}}}`, kv.Event{}, "has no blocks"},
		{"block without tokens_hash", `{"worker_id":1,"event":{"data":{"stored":{"blocks":[{"block_hash":1}]}}}}`, kv.Event{},
			"event.data.stored.blocks[0].tokens_hash: required field is missing"},
		{"block that is not an object", `{"worker_id":1,"event":{"data":{"stored":{"blocks":[7]}}}}`, kv.Event{}, "event.data.stored.blocks[0]: offset"},
		{"float hash", `{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[1.5]}}}}`, kv.Event{},
			"event.data.removed.block_hashes[0]: 1.5 is not a 64-bit integer"},
		{"exponent hash", `{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[1e99]}}}}`, kv.Event{}, "not a 64-bit integer"},
		{"u64 overflow", `{"worker_id":18446744073709551616,"event":{"data":"cleared"}}`, kv.Event{}, "worker_id: 18446744073709551616 is not a 64-bit integer"},
		{"i64 underflow", `{"worker_id":-9223372036854775809,"event":{"data":"cleared"}}`, kv.Event{}, "is not a 64-bit integer"},
		{"hash as a string", `{"worker_id":"1","event":{"data":"cleared"}}`, kv.Event{}, "worker_id: offset 13: want a number"},
		{"leading zero", `{"worker_id":01,"event":{"data":"cleared"}}`, kv.Event{}, "want ',' or '}'"},
		{"unknown tier", `{"worker_id":1,"storage_tier":"tape","event":{"data":"cleared"}}`, kv.Event{}, `storage_tier: unknown storage tier "tape"`},
		{"unknown kind", `{"worker_id":1,"event":{"data":{"evicted":{}}}}`, kv.Event{}, `event.data: unknown event "evicted"`},
		{"unknown string kind", `{"worker_id":1,"event":{"data":"evicted"}}`, kv.Event{}, `event.data: unknown event "evicted"`},
		{"two kinds", `{"worker_id":1,"event":{"data":{"cleared":{},"removed":{"block_hashes":[]}}}}`, kv.Event{}, "exactly one"},
		{"empty data object", `{"worker_id":1,"event":{"data":{}}}`, kv.Event{}, "exactly one"},
		{"duplicate key", `{"worker_id":1,"worker_id":2,"event":{"data":"cleared"}}`, kv.Event{}, `worker_id: key "worker_id" appears twice`},
		{"dp rank overflow", `{"worker_id":1,"event":{"dp_rank":4294967296,"data":"cleared"}}`, kv.Event{}, "dp_rank: 4294967296 does not fit in uint32"},
		{"trailing garbage", `{"worker_id":1,"event":{"data":"cleared"}} x`, kv.Event{}, "unexpected data after the top-level value"},
		{"two documents", `{"worker_id":1,"event":{"data":"cleared"}}{}`, kv.Event{}, "unexpected data after the top-level value"},
		{"truncated", `{"worker_id":1,"event":{"data":"clea`, kv.Event{}, "unterminated string"},
		{"control character in string", "{\"worker_id\":1,\"x\":\"a\tb\",\"event\":{\"data\":\"cleared\"}}", kv.Event{}, "control character"},
		{"bad escape", `{"worker_id":1,"x":"\q","event":{"data":"cleared"}}`, kv.Event{}, "bad escape"},
		{"array instead of object", `[1]`, kv.Event{}, "offset 0: want an object"},
		{"not JSON", "\x00\xff", kv.Event{}, "offset 0: want an object"},
		{"empty", "", kv.Event{}, "want an object"},
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

// The encoder writes exactly the shape Dynamo's serde emits.
func TestEncodeRouterEventJSONGolden(t *testing.T) {
	tests := []struct {
		ev   kv.Event
		want string
	}{
		{kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 123}, EventID: 42, Kind: kv.EventStored, HasParent: true, ParentHash: 987,
			Blocks: []kv.StoredBlock{{BlockHash: 111, TokensHash: 222}, {BlockHash: 1 << 63, TokensHash: 3}}},
			`{"worker_id":123,"storage_tier":"device","event":{"event_id":42,"dp_rank":0,"data":{"stored":{"parent_hash":987,"start_position":null,` +
				`"blocks":[{"block_hash":111,"tokens_hash":222,"mm_extra_info":null},{"block_hash":9223372036854775808,"tokens_hash":3,"mm_extra_info":null}]}}}}`},
		{kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 1, DpRank: 2}, Tier: kv.TierHostPinned, Kind: kv.EventStored,
			Blocks: []kv.StoredBlock{{BlockHash: 5, TokensHash: 6}}},
			`{"worker_id":1,"storage_tier":"host_pinned","event":{"event_id":0,"dp_rank":2,"data":{"stored":{"parent_hash":null,"start_position":null,` +
				`"blocks":[{"block_hash":5,"tokens_hash":6,"mm_extra_info":null}]}}}}`},
		{kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 1}, EventID: 7, Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{111, 112}},
			`{"worker_id":1,"storage_tier":"device","event":{"event_id":7,"dp_rank":0,"data":{"removed":{"block_hashes":[111,112]}}}}`},
		{kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 1}, EventID: 8, Kind: kv.EventRemoved},
			`{"worker_id":1,"storage_tier":"device","event":{"event_id":8,"dp_rank":0,"data":{"removed":{"block_hashes":[]}}}}`},
		{kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 1}, EventID: 9, Tier: kv.TierDisk, Kind: kv.EventCleared},
			`{"worker_id":1,"storage_tier":"disk","event":{"event_id":9,"dp_rank":0,"data":"cleared"}}`},
	}
	for _, tt := range tests {
		got, err := EncodeRouterEventJSON(&tt.ev)
		if err != nil || string(got) != tt.want {
			t.Errorf("encode %+v:\n got %s (%v)\nwant %s", tt.ev, got, err, tt.want)
		}
		if !json.Valid(got) {
			t.Errorf("encoded %s is not valid JSON", got)
		}
	}
}

func TestDecodeRouterEventsJSONBatch(t *testing.T) {
	one := `{"worker_id":1,"event":{"event_id":1,"data":"cleared"}}`
	two := `{"worker_id":2,"event":{"event_id":5,"data":{"removed":{"block_hashes":[3]}}}}`
	tests := []struct {
		name string
		in   string
		want []kv.Event
		err  string
	}{
		{"array", "[" + one + ", " + two + "]", []kv.Event{
			{Worker: kv.WorkerWithDpRank{WorkerID: 1}, EventID: 1, Kind: kv.EventCleared},
			{Worker: kv.WorkerWithDpRank{WorkerID: 2}, EventID: 5, Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{3}}}, ""},
		{"single object", " " + one, []kv.Event{{Worker: kv.WorkerWithDpRank{WorkerID: 1}, EventID: 1, Kind: kv.EventCleared}}, ""},
		{"empty array", "[ ]", []kv.Event{}, ""},
		{"bad entry names its index", "[" + one + `,{"worker_id":1}]`, nil, "[1].event: required field is missing"},
		{"unterminated", "[" + one, nil, "want ',' or ']'"},
		{"trailing comma", "[" + one + ",]", nil, "[1]: offset"},
		{"scalar", "42", nil, "want an array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeRouterEventsJSON([]byte(tt.in))
			if tt.err != "" {
				if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want ErrMalformed containing %q", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v (%v), want %+v", got, err, tt.want)
			}
		})
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
	tests := []struct {
		name string
		in   string
		want Heartbeat
		err  string
	}{
		{"every field", `{"worker_id":7,"url":"http://h:1","data_parallel_start_rank":4,"data_parallel_size":2,"block_size":16,` +
			`"total_kv_blocks":16384,"model_name":"m","kv_events_endpoint":"tcp://h:5557","replay_endpoint":"tcp://h:5558","max_num_batched_tokens":8192}`,
			Heartbeat{WorkerID: 7, URL: "http://h:1", DataParallelStartRank: 4, DataParallelSize: 2, BlockSize: 16, TotalKVBlocks: 16384,
				ModelName: "m", KVEventsEndpoint: "tcp://h:5557", ReplayEndpoint: "tcp://h:5558", MaxNumBatchedTokens: 8192}, ""},
		{"minimal, dp size defaults to 1, unknown fields ignored", `{"worker_id":18446744073709551615,"unknown":{"a":[1]}}`,
			Heartbeat{WorkerID: 1<<64 - 1, DataParallelSize: 1}, ""},
		{"missing worker_id", `{"url":"http://h"}`, Heartbeat{}, "worker_id is required"},
		{"null document", `null`, Heartbeat{}, "worker_id is required"},
		{"worker_id as a string", `{"worker_id":"7"}`, Heartbeat{}, "worker_id"},
		{"negative worker_id", `{"worker_id":-1}`, Heartbeat{}, "worker_id"},
		{"fractional block size", `{"worker_id":1,"block_size":1.5}`, Heartbeat{}, "block_size"},
		{"dp size zero", `{"worker_id":7,"data_parallel_size":0}`, Heartbeat{}, "data_parallel_size must be in 1..1024, got 0"},
		{"dp size too large", `{"worker_id":7,"data_parallel_size":100000}`, Heartbeat{}, "data_parallel_size"},
		{"ranks overflow", `{"worker_id":7,"data_parallel_start_rank":4294967295,"data_parallel_size":2}`, Heartbeat{}, "do not fit in uint32"},
		{"truncated", `{"worker_id":7`, Heartbeat{}, "heartbeat JSON"},
		{"garbage", "\xff", Heartbeat{}, "heartbeat JSON"},
		{"prefill role", `{"worker_id":3,"role":"prefill"}`, Heartbeat{WorkerID: 3, DataParallelSize: 1, Role: "prefill"}, ""},
		{"unknown role", `{"worker_id":3,"role":"kv_producer"}`, Heartbeat{}, "unknown worker role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hb, err := DecodeHeartbeat([]byte(tt.in))
			if tt.err != "" {
				if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want ErrMalformed containing %q", err, tt.err)
				}
				return
			}
			if err != nil || hb != tt.want {
				t.Fatalf("got %+v (%v), want %+v", hb, err, tt.want)
			}
			data, err := EncodeHeartbeat(hb)
			if err != nil {
				t.Fatal(err)
			}
			again, err := DecodeHeartbeat(data)
			if err != nil || again != hb {
				t.Fatalf("round trip through %s: %+v (%v)", data, again, err)
			}
			if p := hb.Proto(); p.WorkerId != hb.WorkerID || p.DataParallelSize != hb.DataParallelSize || p.ReplayEndpoint != hb.ReplayEndpoint ||
				p.MaxNumBatchedTokens != hb.MaxNumBatchedTokens || p.Role != RoleProto(hb.Role) {
				t.Fatalf("proto %v does not carry %+v", p, hb)
			}
		})
	}
}
