package natsbus

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
)

// A batch with an event of a type the decoder does not know (as newer
// engines add them) delivers its other events.
func TestEventSourceAppliesTheRestOfABatch(t *testing.T) {
	var c collector
	nc, src := startKVEvents(t, slog.New(slog.DiscardHandler), &c)
	batch := `[{"worker_id":4,"event":{"event_id":0,"dp_rank":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}},
	 {"worker_id":4,"event":{"event_id":1,"dp_rank":1,"data":{"offloaded":{"block_hashes":[1]}}}},
	 {"worker_id":4,"event":{"event_id":2,"dp_rank":1,"data":{"removed":{"block_hashes":[1]}}}}]`
	if err := nc.Publish("kv.events", []byte(batch)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "the batch's two known events", func() bool { return c.len() == 2 })
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.evs[0].Kind != kv.EventStored || c.evs[1].Kind != kv.EventRemoved || c.evs[1].EventID != 2 {
		t.Fatalf("events %+v", c.evs)
	}
	if st := src.Stats(); st.Gaps != 0 || len(st.Malformed) != 0 {
		t.Fatalf("the skipped event's id counted as a gap or the batch as malformed: %+v", st)
	}
}

// jsonByteArray spells b as serde_json writes a Vec<u8>.
func jsonByteArray(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = strconv.Itoa(int(c))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Dynamo's event plane wraps each RouterEvent in an envelope: JSON on its
// NATS transport (NatsEnvelope: publisher_id, sequence, published_at,
// payload as a byte array), named MessagePack with its msgpack codec
// (EventEnvelope: topic, publisher_id, sequence, published_at, payload).
// Both deliver the event, a Cleared of dp rank 1 here.
func TestEventSourceReadsDynamoEnvelopes(t *testing.T) {
	var c collector
	nc, _ := startKVEvents(t, slog.New(slog.DiscardHandler), &c)
	payload := []byte(`{"worker_id":9,"storage_tier":"device","event":{"event_id":5,"data":"cleared","dp_rank":1}}`)
	jsonEnv := `{"publisher_id":12345,"sequence":1,"published_at":1700000000000,"payload":` + jsonByteArray(payload) + `}`
	var mp bytes.Buffer
	enc := msgpack.NewEncoder(&mp)
	_ = enc.EncodeMapLen(5)
	for _, kv := range []struct {
		k string
		v any
	}{{"topic", "kv-events"}, {"publisher_id", uint64(12345)}, {"sequence", uint64(2)}, {"published_at", uint64(1700000000001)}, {"payload", payload}} {
		_ = enc.EncodeString(kv.k)
		if b, ok := kv.v.([]byte); ok {
			_ = enc.EncodeBytes(b)
		} else {
			_ = enc.Encode(kv.v)
		}
	}
	for _, msg := range [][]byte{[]byte(jsonEnv), mp.Bytes()} {
		if err := nc.Publish("kv.events", msg); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, waitTimeout, "both envelopes' events", func() bool { return c.len() == 2 })
	want := kv.WorkerWithDpRank{WorkerID: 9, DpRank: 1}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range c.evs {
		if ev.Worker != want || ev.Kind != kv.EventCleared || ev.EventID != 5 {
			t.Fatalf("event %+v, want rank 9/1's Cleared 5", ev)
		}
	}
}

// Every dropped or skipped input is counted by reason and logged at WARN
// naming the reason (and, for a skipped event, its worker and rank).
func TestEventSourceCountsAndLogsDrops(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	var c collector
	logs := &testutil.SyncBuffer{}
	var mu sync.Mutex
	dropped := map[string]int{}
	src, err := StartEventSource(context.Background(), nc, EventSourceConfig{
		Subject: "kv.events", Log: slog.New(slog.NewTextHandler(logs, nil)),
		OnDrop: func(reason string) { mu.Lock(); dropped[reason]++; mu.Unlock() },
	}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_ = nc.Publish("kv.events", []byte(`{"worker_id":4,"event":{"event_id":7,"dp_rank":3,"data":"reset_all"}}`))
	_ = nc.Publish("kv.events", []byte(`{"publisher_id":1,"sequence":1,"published_at":1,"payload":[1,2],"extra":0}`))
	_ = nc.Publish("kv.events", []byte{0x81, 0xa1, 'x', 0x01}) // a MessagePack map that is no envelope
	testutil.Eventually(t, waitTimeout, "one skip and two malformed envelopes", func() bool {
		st := src.Stats()
		return st.Skipped["unknown_event_type"] == 1 && st.Malformed[MalformedEnvelope] == 2
	})
	mu.Lock()
	if dropped["unknown_event_type"] != 1 {
		t.Fatalf("OnDrop saw %v", dropped)
	}
	mu.Unlock()
	out := logs.String()
	for _, want := range [][]string{
		{`level=WARN msg="skipped KV event"`, "reason=unknown_event_type", "worker=4", "dp_rank=3", "event_id=7", "type=reset_all"},
		{`level=WARN msg="dropped malformed KV event message"`, "reason=envelope", `unknown envelope field \"extra\"`},
	} {
		found := false
		for line := range strings.SplitSeq(out, "\n") {
			found = found || containsAll(line, want)
		}
		if !found {
			t.Fatalf("no log line with %q:\n%s", want, out)
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// A RouterEvent with fields this router does not know (a newer Dynamo's
// additions) is applied, and the fields are counted and logged by name,
// never dropped silently; Dynamo's known unused fields (start_position,
// mm_extra_info) are not reported.
func TestEventSourceCountsUnknownFields(t *testing.T) {
	var c collector
	var logs bytes.Buffer
	nc, src := startKVEvents(t, slog.New(slog.NewTextHandler(&logs, nil)), &c)
	batch := `[{"worker_id":4,"priority_hint":3,"event":{"event_id":0,"dp_rank":1,"origin":"x",
	  "data":{"stored":{"parent_hash":null,"start_position":null,"lineage":7,
	  "blocks":[{"block_hash":1,"tokens_hash":2,"mm_hash":9,"mm_extra_info":null}]}}}},
	 {"worker_id":4,"event":{"event_id":1,"dp_rank":1,"data":{"removed":{"block_hashes":[1],"reason":"evicted"}}}}]`
	if err := nc.Publish("kv.events", []byte(batch)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "both events applied", func() bool { return c.len() == 2 })
	if st := src.Stats(); st.UnknownFields != 5 || len(st.Malformed) != 0 {
		t.Fatalf("unknown fields %d (want 5), malformed %v", st.UnknownFields, st.Malformed)
	}
	src.Close()
	line := logs.String()
	for _, want := range []string{"does not use", "priority_hint", "origin", "lineage", "mm_hash", "worker=4", "dp_rank=1"} {
		if !strings.Contains(line, want) {
			t.Errorf("log lacks %q:\n%s", want, line)
		}
	}
	for _, known := range []string{"start_position", "mm_extra_info"} {
		if strings.Contains(line, known) {
			t.Errorf("log names the known field %q:\n%s", known, line)
		}
	}
}

// startKVEvents starts an embedded NATS server and an event source on
// "kv.events" that hands events to c; the source is closed at cleanup.
func startKVEvents(t *testing.T, log *slog.Logger, c *collector) (*nats.Conn, *EventSource) {
	t.Helper()
	nc := dial(t, startServer(t))
	src, err := StartEventSource(context.Background(), nc, EventSourceConfig{Subject: "kv.events", Log: log}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	return nc, src
}
