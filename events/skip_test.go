package events

import (
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// An event type the decoder does not know (newer engines and Dynamo
// versions add some) is skipped and reported; the batch's other events
// are applied. Serde writes a variant without data as a string and one
// with data as a one-key object, so both spellings of a new type occur.
func TestUnknownEventTypeIsSkippedInJSON(t *testing.T) {
	doc := `[
	 {"worker_id":5,"event":{"event_id":1,"dp_rank":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":11,"tokens_hash":21}]}}}},
	 {"worker_id":5,"event":{"event_id":2,"dp_rank":1,"data":{"offloaded":{"block_hashes":[11],"medium":"cpu"}}}},
	 {"worker_id":5,"event":{"event_id":3,"dp_rank":0,"data":"reset_all"}},
	 {"worker_id":5,"event":{"event_id":4,"dp_rank":1,"data":{"removed":{"block_hashes":[11]}}}}
	]`
	b, err := DecodeRouterEventsBatchJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r0, r1 := kv.WorkerWithDpRank{WorkerID: 5}, kv.WorkerWithDpRank{WorkerID: 5, DpRank: 1}
	wantEvents := []kv.Event{
		{Worker: r1, EventID: 1, Kind: kv.EventStored, Blocks: []kv.StoredBlock{{BlockHash: 11, TokensHash: 21}}},
		{Worker: r1, EventID: 4, Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{11}},
	}
	wantSkipped := []Skipped{
		{Worker: r1, EventID: 2, Type: "offloaded", Reason: ReasonUnknownEventType, At: 1},
		{Worker: r0, EventID: 3, Type: "reset_all", Reason: ReasonUnknownEventType, At: 1},
	}
	if !reflect.DeepEqual(b.Events, wantEvents) || !reflect.DeepEqual(b.Skipped, wantSkipped) {
		t.Fatalf("got events %+v skipped %+v\nwant %+v and %+v", b.Events, b.Skipped, wantEvents, wantSkipped)
	}

	// A single document of an unknown type: nothing to apply, one skip.
	b, err = DecodeRouterEventsBatchJSON([]byte(`{"worker_id":5,"event":{"event_id":9,"data":{"pinned":{}}}}`))
	if err != nil || len(b.Events) != 0 || len(b.Skipped) != 1 || b.Skipped[0].Type != "pinned" || b.Skipped[0].EventID != 9 {
		t.Fatalf("single unknown event: %+v, %v", b, err)
	}
	// The strict decoder still refuses it, saying why.
	if _, err := DecodeRouterEventsJSON([]byte(doc)); !errors.Is(err, ErrUnknownEventType) || !errors.Is(err, ErrMalformed) {
		t.Fatalf("strict decoder: %v", err)
	}
	// A malformed entry still fails the whole batch: half a batch never
	// reaches the index.
	bad := `[{"worker_id":5,"event":{"data":{"offloaded":{}}}},{"worker_id":5,"event":{"data":{"removed":{"block_hashes":[1.5]}}}}]`
	if _, err := DecodeRouterEventsBatchJSON([]byte(bad)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("malformed entry beside an unknown one: %v", err)
	}
	// An unknown type's body is still checked as JSON, and a data object
	// still holds exactly one variant.
	for _, doc := range []string{
		`[{"worker_id":5,"event":{"data":{"offloaded":{"x":}}}}]`,
		`[{"worker_id":5,"event":{"data":{"offloaded":{},"stored":{}}}}]`,
		`[{"event":{"data":"reset_all"}}]`,
	} {
		if _, err := DecodeRouterEventsBatchJSON([]byte(doc)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s: %v", doc, err)
		}
	}
}

// unknownTypeEvent is a KvEvent whose data is oneof member 9, which this
// build does not know: as a newer publisher's event arrives.
func unknownTypeEvent(t *testing.T, worker uint64, rank uint32, id uint64) []byte {
	t.Helper()
	known, err := proto.Marshal(&messages.KvEvent{Worker: &messages.WorkerRank{WorkerId: worker, DpRank: rank}, EventId: id})
	if err != nil {
		t.Fatal(err)
	}
	known = protowire.AppendTag(known, 9, protowire.BytesType)
	return protowire.AppendBytes(known, []byte{0x08, 0x01}) // its body: field 1 = 1
}

func TestUnknownEventTypeIsSkippedInProtobuf(t *testing.T) {
	stored, err := proto.Marshal(ToProto(&kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 3}, EventID: 1, Kind: kv.EventStored,
		Blocks: []kv.StoredBlock{{BlockHash: 1, TokensHash: 2}}}))
	if err != nil {
		t.Fatal(err)
	}
	var batch []byte
	for _, ev := range [][]byte{stored, unknownTypeEvent(t, 3, 2, 2)} {
		batch = protowire.AppendTag(batch, 1, protowire.BytesType)
		batch = protowire.AppendBytes(batch, ev)
	}
	b, err := DecodeProtoBatch(batch)
	if err != nil {
		t.Fatal(err)
	}
	want := Skipped{Worker: kv.WorkerWithDpRank{WorkerID: 3, DpRank: 2}, EventID: 2, Type: "field 9", Reason: ReasonUnknownEventType, At: 1}
	if len(b.Events) != 1 || b.Events[0].Kind != kv.EventStored || len(b.Skipped) != 1 || b.Skipped[0] != want {
		t.Fatalf("got %+v, want the stored event and skipped %+v", b, want)
	}
	if _, err := DecodeProto(batch); !errors.Is(err, ErrUnknownEventType) {
		t.Fatalf("strict decoder: %v", err)
	}
	// An event with no data and no unknown member is still malformed.
	empty, _ := proto.Marshal(&messages.KvEventBatch{Events: []*messages.KvEvent{{Worker: &messages.WorkerRank{WorkerId: 3}}}})
	if _, err := DecodeProtoBatch(empty); !errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnknownEventType) {
		t.Fatalf("event without data: %v", err)
	}
}

// Dynamo's residency_domain: "worker" (or absent) is the worker rank's
// own cache; "cache_owner" belongs to a cache that outlives the rank, which
// Dynamo never sends to consumers that do not model cache owners. Such an
// event is skipped with its reason, not indexed under the rank.
func TestResidencyDomain(t *testing.T) {
	doc := `[
	 {"worker_id":5,"storage_tier":"host_pinned","residency_domain":"worker","event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2}]}}}},
	 {"worker_id":5,"storage_tier":"host_pinned","residency_domain":"cache_owner","state_source":{"x":1},"event":{"event_id":2,"data":{"stored":{"blocks":[{"block_hash":3,"tokens_hash":4}]}}}},
	 {"worker_id":5,"residency_domain":null,"event":{"event_id":3,"data":"cleared"}}
	]`
	b, err := DecodeRouterEventsBatchJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 2 || b.Events[0].EventID != 1 || b.Events[1].Kind != kv.EventCleared {
		t.Fatalf("events %+v", b.Events)
	}
	want := Skipped{Worker: kv.WorkerWithDpRank{WorkerID: 5}, EventID: 2, Type: "stored in residency domain cache_owner",
		Reason: ReasonUnsupportedResidencyDomain, At: 1}
	if len(b.Skipped) != 1 || b.Skipped[0] != want {
		t.Fatalf("skipped %+v, want %+v", b.Skipped, want)
	}
	for _, bad := range []string{
		`{"worker_id":5,"residency_domain":1,"event":{"data":"cleared"}}`,
		`{"worker_id":5,"residency_domain":"worker","residency_domain":"worker","event":{"data":"cleared"}}`,
	} {
		if _, err := DecodeRouterEventsBatchJSON([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
}
