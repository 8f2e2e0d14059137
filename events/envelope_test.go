package events

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvrouter/kvrouter/kv"
)

// routerEventDoc is a RouterEvent as Dynamo's serde_json writes it
// (protocols.rs field order), the payload the envelopes below carry.
const routerEventDoc = `{"worker_id":7,"storage_tier":"device","event":{"event_id":42,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[{"block_hash":18446744073709551615,"tokens_hash":222,"mm_extra_info":null}]}},"dp_rank":1}}`

var routerEventWant = kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 7, DpRank: 1}, EventID: 42, Kind: kv.EventStored,
	Blocks: []kv.StoredBlock{{BlockHash: kv.ExternalBlockHash(^uint64(0)), TokensHash: 222}}}

// jsonBytes spells b as serde_json spells a Vec<u8>: an array of numbers.
func jsonBytes(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = strconv.Itoa(int(c))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// natsEnvelope is Dynamo's NATS event-plane envelope (NatsEnvelope in
// lib/runtime/src/transports/event_plane/nats.rs: publisher_id,
// sequence, published_at, payload), with fields before it such as the
// generic EventEnvelope's topic.
func natsEnvelope(prefix string, payload []byte) string {
	return fmt.Sprintf(`{%s"publisher_id":12345,"sequence":1,"published_at":1700000000000,"payload":%s}`, prefix, jsonBytes(payload))
}

// msgpackNamed writes a map with its keys in the given order, as
// rmp_serde's to_vec_named writes a struct.
func msgpackNamed(t *testing.T, kvs ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if err := enc.EncodeMapLen(len(kvs) / 2); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(kvs); i += 2 {
		if err := enc.EncodeString(kvs[i].(string)); err != nil {
			t.Fatal(err)
		}
		var err error
		switch v := kvs[i+1].(type) {
		case []byte:
			err = enc.EncodeBytes(v)
		case rawMsgpack:
			_, err = buf.Write(v)
		default:
			err = enc.Encode(v)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

type rawMsgpack []byte

// msgpackRouterEvent is routerEventDoc in MessagePack with named keys.
func msgpackRouterEvent(t *testing.T) []byte {
	block := msgpackNamed(t, "block_hash", ^uint64(0), "tokens_hash", uint64(222), "mm_extra_info", nil)
	stored := msgpackNamed(t, "parent_hash", nil, "start_position", nil, "blocks", rawMsgpack(append([]byte{0x91}, block...)))
	data := msgpackNamed(t, "stored", rawMsgpack(stored))
	event := msgpackNamed(t, "event_id", uint64(42), "data", rawMsgpack(data), "dp_rank", uint32(1))
	return msgpackNamed(t, "worker_id", uint64(7), "storage_tier", "device", "event", rawMsgpack(event))
}

// msgpackEnvelope is the event plane's EventEnvelope (traits.rs: topic,
// publisher_id, sequence, published_at, payload) as the msgpack codec
// writes it, with newer versions' published_at_ns.
func msgpackEnvelope(t *testing.T, payload []byte) []byte {
	return msgpackNamed(t, "topic", "namespace.dynamo.component.backend.kv-events", "publisher_id", uint64(12345),
		"sequence", uint64(3), "published_at", uint64(1700000000000), "payload", payload,
		"published_at_ns", uint64(1_700_000_000_000_000_000))
}

func TestEventPlaneEnvelopes(t *testing.T) {
	cleared := []byte(`{"worker_id":7,"event":{"event_id":43,"data":"cleared","dp_rank":1}}`)
	clearedWant := kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 7, DpRank: 1}, EventID: 43, Kind: kv.EventCleared}
	tests := []struct {
		name string
		data []byte
		want []kv.Event
	}{
		{"NATS JSON envelope", []byte(natsEnvelope("", []byte(routerEventDoc))), []kv.Event{routerEventWant}},
		{"JSON EventEnvelope with topic", []byte(natsEnvelope(`"topic":"kv-events",`, cleared)), []kv.Event{clearedWant}},
		{"JSON envelope, batch payload", []byte(natsEnvelope("", []byte("["+routerEventDoc+","+string(cleared)+"]"))),
			[]kv.Event{routerEventWant, clearedWant}},
		{"JSON envelope, MessagePack payload", []byte(natsEnvelope("", msgpackRouterEvent(t))), []kv.Event{routerEventWant}},
		{"MessagePack envelope, MessagePack payload", msgpackEnvelope(t, msgpackRouterEvent(t)), []kv.Event{routerEventWant}},
		{"MessagePack envelope, JSON payload", msgpackEnvelope(t, cleared), []kv.Event{clearedWant}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Batch
			var err error
			if isMsgpackMap(tt.data) {
				b, err = DecodeMsgpackEnvelope(tt.data)
			} else {
				b, err = DecodeRouterEventsBatchJSON(tt.data)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(b.Events, tt.want) || len(b.Skipped) != 0 {
				t.Fatalf("got %+v\nwant %+v", b, tt.want)
			}
		})
	}
}

// Whatever is not exactly an envelope is refused with a reason, never
// half-read.
func TestMalformedEnvelopes(t *testing.T) {
	good := []byte(routerEventDoc)
	tests := []struct {
		name string
		data []byte
		err  string
	}{
		{"unknown field", []byte(`{"publisher_id":1,"sequence":1,"published_at":1,"payload":[],"priority":3}`), `unknown envelope field "priority"`},
		{"missing sequence", []byte(`{"publisher_id":1,"published_at":1,"payload":` + jsonBytes(good) + `}`), "sequence: required field is missing"},
		{"missing payload", []byte(`{"publisher_id":1,"sequence":1,"published_at":1}`), "payload: required field is missing"},
		{"byte out of range", []byte(`{"publisher_id":1,"sequence":1,"published_at":1,"payload":[256]}`), "256 is not a byte"},
		{"duplicate key", []byte(`{"publisher_id":1,"publisher_id":2,"sequence":1,"published_at":1,"payload":[]}`), "appears twice"},
		{"payload neither JSON nor MessagePack", []byte(natsEnvelope("", []byte("hello"))), "neither JSON nor MessagePack"},
		{"empty payload", []byte(natsEnvelope("", nil)), "neither JSON nor MessagePack"},
		{"envelope in an envelope", []byte(natsEnvelope("", []byte(natsEnvelope("", good)))), "payload is itself an envelope"},
		{"malformed payload", []byte(natsEnvelope("", []byte(`{"worker_id":1}`))), "payload: malformed event: event: required field is missing"},
		{"MessagePack: unknown field", msgpackNamed(t, "publisher_id", uint64(1), "sequence", uint64(1), "published_at", uint64(1),
			"payload", good, "shard", uint64(2)), `unknown envelope field "shard"`},
		{"MessagePack: trailing data", append(msgpackEnvelope(t, good), 0xc0), "unexpected data after the MessagePack value"},
		{"MessagePack: truncated", msgpackEnvelope(t, good)[:20], "truncated MessagePack"},
		{"MessagePack: deep payload", msgpackEnvelope(t, bytes.Repeat([]byte{0x91}, 100000)), "nested deeper than"},
		{"MessagePack: payload map with integer keys", msgpackEnvelope(t, []byte{0x81, 0x01, 0x02}), "MessagePack payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if isMsgpackMap(tt.data) {
				_, err = DecodeMsgpackEnvelope(tt.data)
			} else {
				_, err = DecodeRouterEventsBatchJSON(tt.data)
			}
			if !errors.Is(err, ErrEnvelope) || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want an envelope error containing %q", err, tt.err)
			}
		})
	}
}

// The envelope's metadata is optional to nobody: a RouterEvent whose
// first key is worker_id is never taken for an envelope.
func TestRouterEventIsNotAnEnvelope(t *testing.T) {
	if isEnvelopeJSON([]byte(routerEventDoc)) || !isEnvelopeJSON([]byte(natsEnvelope("", nil))) {
		t.Fatal("envelope detection by first key is wrong")
	}
}
