package test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// An engine registered through POST /workers with a kv_events_endpoint
// and publishing vLLM's LoRA block-pool shape: the router subscribes,
// and thirty prompts the engine cached on the adapter all match a /route
// for that adapter and none for the base model; an event of an unknown
// type in every batch is skipped, counted and does not cost the rest.
func TestZMQLoRAThroughTheAPI(t *testing.T) {
	const bs = 16
	rep := StartReplica(t, nil)
	base := BaseURL(rep)
	tokens := map[uint64][]uint32{}
	pub, err := mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{
		Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", testutil.FreePort(t)), BlockSize: bs, Encoding: zmqevents.EncodingMap,
		Wire:   mockengine.ZMQWire{LoRAName: "sql-lora", LoRAID: 1, UnknownEventType: "BlockMoved"},
		Tokens: func(ev *kv.Event) ([]uint32, error) { return tokens[ev.EventID], nil }, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	body := fmt.Sprintf(`{"worker_id": 5, "url": "http://%s", "kv_events_endpoint": %q}`, testutil.FreeAddr(t), pub.Endpoint())
	var reg map[string]any
	if code := Post(t, base+"/workers", body, &reg); code != 200 || reg["kv_events_endpoint"] != pub.Endpoint() {
		t.Fatalf("POST /workers: %d %v", code, reg)
	}
	w := kv.WorkerWithDpRank{WorkerID: 5}
	testutil.EventuallyNil(t, 10*time.Second, func() error { // past the PUB socket's slow-joiner window
		ev := kv.Event{Worker: w, Kind: kv.EventCleared}
		if err := pub.PublishEvent(context.Background(), &ev); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if _, m := Get(t, base+"/metrics"); metricSum(m, "kvrouter_zmq_messages_total") == 0 {
			return fmt.Errorf("no ZMQ batch heard yet")
		}
		return nil
	})
	prompts := make([][]uint32, 30)
	for i := range prompts {
		p := make([]uint32, 3*bs)
		for j := range p {
			p[j] = uint32(100*(i+1) + j)
		}
		prompts[i] = p
		local := hashing.BlockHashes(p, bs, hashing.Options{})
		seq := hashing.SequenceHashes(local)
		ev := kv.Event{Worker: w, EventID: uint64(i), Kind: kv.EventStored}
		for k := range seq {
			ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[k]), TokensHash: local[k]})
		}
		tokens[ev.EventID] = p
		if err := pub.PublishEvent(context.Background(), &ev); err != nil {
			t.Fatal(err)
		}
	}
	route := func(p []uint32, lora string) uint32 {
		var r routeReply
		if code := Post(t, base+"/route", map[string]any{"token_ids": p, "lora_name": lora, "update_states": false}, &r); code != 200 {
			t.Fatalf("/route: %d %+v", code, r)
		}
		return r.OverlapBlocks
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if got := route(prompts[len(prompts)-1], "sql-lora"); got != 3 {
			return fmt.Errorf("last prompt: %d of 3 blocks matched for the adapter", got)
		}
		return nil
	})
	for i, p := range prompts {
		if got := route(p, "sql-lora"); got != 3 {
			t.Errorf("prompt %d: %d of 3 blocks matched for the adapter", i, got)
		}
		if got := route(p, ""); got != 0 {
			t.Errorf("prompt %d: the base model matched %d blocks of the adapter's cache", i, got)
		}
	}
	_, m := Get(t, base+"/metrics")
	if n := metricSum(m, `kvrouter_kv_events_dropped_total{reason="unknown_event_type"}`); n < 30 {
		t.Fatalf("unknown event types counted %v, want >= 30:\n%s", n, grepLines(m, "kvrouter_kv_events_dropped"))
	}
}
