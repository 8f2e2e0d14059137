package events

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/messages"
)

var jsonSeeds = []string{
	`{"worker_id":123,"storage_tier":"device","event":{"event_id":42,"dp_rank":0,"data":{"stored":{"parent_hash":987,"blocks":[{"block_hash":111,"tokens_hash":222}]}}}}`,
	`{"worker_id":1,"event":{"event_id":5,"dp_rank":3,"data":{"removed":{"block_hashes":[111,-112]}}}}`,
	`{"worker_id":1,"event":{"event_id":9,"data":"cleared"}}`,
	`[{"worker_id":1,"event":{"data":"cleared"}}]`,
	`{"worker_id":1,"event":{"data":{"stored":{"blocks":[]}}}}`,
	`{"worker_id":-1,"dp_rank":2,"x":[1.5,{"y":"\u00e9"}],"event":{"data":{"cleared":{}}}}`,
	`{"worker_id":1,"event":{"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[{"block_hash":-9223372036854775808,"tokens_hash":2,"mm_extra_info":null}]}}}}`,
	`{"worker_id":900,"storage_tier":"shared","event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}`,
	`{"worker_id":900,"storage_tier":"SHARED","event":{"data":{"removed":{"block_hashes":[1]}}}}`,
	`{"worker_id":1,"storage_tier":"tape","event":{"data":"cleared"}}`,
	`{"worker_id":1,"storage_tier":7,"event":{"data":"cleared"}}`,
	`{`, ``, `null`,
	// Events of a type the decoder does not know: skipped, the rest kept.
	`[{"worker_id":1,"event":{"event_id":1,"data":{"offloaded":{"block_hashes":[1]}}}},{"worker_id":1,"event":{"event_id":2,"data":"cleared"}}]`,
	`{"worker_id":1,"event":{"event_id":3,"dp_rank":1,"data":"reset_all"}}`,
	// Dynamo's event-plane envelopes (NATS JSON, and the generic one with
	// its topic) around a RouterEvent: payload bytes are
	// {"worker_id":1,"event":{"data":"cleared"}}.
	`{"publisher_id":12345,"sequence":1,"published_at":1700000000000,"payload":[123,34,119,111,114,107,101,114,95,105,100,34,58,49,44,34,101,118,101,110,116,34,58,123,34,100,97,116,97,34,58,34,99,108,101,97,114,101,100,34,125,125]}`,
	`{"topic":"kv-events","publisher_id":1,"sequence":2,"published_at":3,"published_at_ns":4,"payload":[91,93]}`,
	`{"publisher_id":1,"sequence":1,"published_at":1,"payload":[129,161,120,1]}`,
	`{"publisher_id":1,"sequence":1,"published_at":1,"payload":[256]}`,
}

// Whatever decodes must re-encode and decode to the same event; nothing
// may panic.
func FuzzDecodeRouterEventJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := DecodeRouterEventsJSON(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		for i := range evs {
			out, err := EncodeRouterEventJSON(&evs[i])
			if err != nil {
				t.Fatalf("decoded event does not re-encode: %+v: %v", evs[i], err)
			}
			again, err := DecodeRouterEventJSON(out)
			if err != nil || !reflect.DeepEqual(again, evs[i]) {
				t.Fatalf("round trip changed %+v into %+v (%v)", evs[i], again, err)
			}
		}
	})
}

func FuzzDecodeProto(f *testing.F) {
	for _, s := range jsonSeeds[:3] {
		evs, err := DecodeRouterEventsJSON([]byte(s))
		if err != nil {
			f.Fatal(err)
		}
		data, err := EncodeProtoBatch(evs)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{0xff, 0x01})
	// The per-block form of a Stored event (the encoder sends the packed one).
	parent := uint64(5)
	perBlock, err := proto.Marshal(&messages.KvEventBatch{Events: []*messages.KvEvent{{
		Worker: &messages.WorkerRank{WorkerId: 2}, Data: &messages.KvEvent_Stored{Stored: &messages.BlockStored{
			ParentHash: &parent, Blocks: []*messages.StoredBlock{{BlockHash: 6, TokensHash: 7}}}}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(perBlock)
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := DecodeProto(data)
		if err != nil {
			return
		}
		out, err := EncodeProtoBatch(evs)
		if err != nil {
			t.Fatalf("decoded events do not re-encode: %v", err)
		}
		again, err := DecodeProto(out)
		if err != nil || !reflect.DeepEqual(again, evs) {
			t.Fatalf("round trip changed events: %v", err)
		}
	})
}

// Dynamo's MessagePack event-plane envelope: whatever decodes must
// re-encode as RouterEvents and decode to the same events; nothing may
// panic, however deep or truncated the input.
func FuzzDecodeMsgpackEnvelope(f *testing.F) {
	t := &testing.T{}
	f.Add(msgpackEnvelope(t, msgpackRouterEvent(t)))
	f.Add(msgpackEnvelope(t, []byte(routerEventDoc)))
	f.Add(msgpackEnvelope(t, []byte{0x91, 0x91, 0x91, 0xc0}))
	f.Add(msgpackNamed(t, "publisher_id", uint64(1), "payload", []byte{0x80}))
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeMsgpackEnvelope(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) || !errors.Is(err, ErrEnvelope) {
				t.Fatalf("error %v does not wrap ErrMalformed and ErrEnvelope", err)
			}
			return
		}
		for i := range b.Events {
			out, err := EncodeRouterEventJSON(&b.Events[i])
			if err != nil {
				t.Fatalf("decoded event does not re-encode: %+v: %v", b.Events[i], err)
			}
			again, err := DecodeRouterEventJSON(out)
			if err != nil || !reflect.DeepEqual(again, b.Events[i]) {
				t.Fatalf("round trip changed %+v into %+v (%v)", b.Events[i], again, err)
			}
		}
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add([]byte(`{"worker_id":7,"url":"http://h","data_parallel_size":2}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"worker_id":7,"url":"http://h:1","data_parallel_start_rank":4,"data_parallel_size":2,"block_size":16,` +
		`"total_kv_blocks":16384,"model_name":"m","kv_events_endpoint":"tcp://h:5557","replay_endpoint":"tcp://h:5558","max_num_batched_tokens":8192}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		hb, err := DecodeHeartbeat(data)
		if err != nil {
			return
		}
		if hb.DataParallelSize == 0 || hb.DataParallelSize > MaxDataParallelSize {
			t.Fatalf("accepted dp size %d", hb.DataParallelSize)
		}
		out, err := EncodeHeartbeat(hb)
		if err != nil {
			t.Fatalf("decoded heartbeat does not re-encode: %+v: %v", hb, err)
		}
		again, err := DecodeHeartbeat(out)
		if err != nil || again != hb {
			t.Fatalf("round trip changed %+v into %+v (%v)", hb, again, err)
		}
	})
}
