package httpapi

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	itu "github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/zmqevents"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A field POST /workers does not know is refused with its name, not
// answered "registered" and dropped.
func TestAddWorkerRefusesUnknownFields(t *testing.T) {
	g := startRig(t, rigOpts{})
	for _, tt := range []struct{ body, want string }{
		{`{"worker_id": 5, "url": "http://10.0.0.5:8000", "kv_event_endpoint": "tcp://10.0.0.5:5557"}`, `unknown field "kv_event_endpoint"`},
		{`{"worker_id": 5, "url": "http://10.0.0.5:8000", "dp_size": 2}`, `unknown field "dp_size"`},
		{`{"worker_id": 5} {"worker_id": 6}`, "data after the object"},
		{`{"worker_id": "5"}`, `field "worker_id"`},
	} {
		code, out, _ := call(t, "POST", g.url+"/workers", "", tt.body)
		if code != 400 || !strings.Contains(fmt.Sprint(out["error"]), tt.want) {
			t.Errorf("%s: %d %v, want 400 naming %s", tt.body, code, out, tt.want)
		}
	}
	if ids := registered(t, g.r); len(ids) != 0 {
		t.Fatalf("registered %v", ids)
	}
}

// kv_events_endpoint is checked like a heartbeat's and subscribed with the
// registration's dp size and start rank; without ZMQ ingestion it is
// refused.
func TestAddWorkerKVEventsEndpoint(t *testing.T) {
	var mu sync.Mutex
	var got []zmqevents.WorkerEndpoint
	g := startRig(t, rigOpts{mutate: func(o *Options) {
		o.SubscribeKVEvents = func(ep zmqevents.WorkerEndpoint) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, ep)
			return nil
		}
	}})
	body := `{"worker_id": 5, "url": "http://10.0.0.5:8000", "data_parallel_size": 2, "data_parallel_start_rank": 4,
		"kv_events_endpoint": "tcp://10.0.0.5:5557", "replay_endpoint": "tcp://10.0.0.5:5558"}`
	if code, out, _ := call(t, "POST", g.url+"/workers", "", body); code != 200 || out["kv_events_endpoint"] != "tcp://10.0.0.5:5557" {
		t.Fatalf("%d %v", code, out)
	}
	want := zmqevents.WorkerEndpoint{WorkerID: 5, Endpoint: "tcp://10.0.0.5:5557", ReplayEndpoint: "tcp://10.0.0.5:5558",
		DPSize: 2, DPStartRank: 4}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("subscribed %+v, want %+v", got, want)
	}
	for _, tt := range []struct{ body, want string }{
		{`{"worker_id": 6, "url": "http://10.0.0.6:8000", "kv_events_endpoint": "tcp://169.254.169.254:5557"}`, "kv_events_endpoint"},
		{`{"worker_id": 6, "url": "http://10.0.0.6:8000", "kv_events_endpoint": "tcp://8.8.8.8:5557"}`, "kv_events_endpoint"},
		{`{"worker_id": 6, "url": "http://10.0.0.6:8000", "kv_events_endpoint": "tcp://10.0.0.6:5557", "replay_endpoint": "ipc:///tmp/x"}`, "replay_endpoint"},
		{`{"worker_id": 6, "url": "http://10.0.0.6:8000", "replay_endpoint": "tcp://10.0.0.6:5558"}`, "needs kv_events_endpoint"},
	} {
		if code, out, _ := call(t, "POST", g.url+"/workers", "", tt.body); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), tt.want) {
			t.Errorf("%s: %d %v, want 400 naming %s", tt.body, code, out, tt.want)
		}
	}
	if len(got) != 1 {
		t.Fatalf("refused registrations subscribed: %+v", got)
	}

	plain := startRig(t, rigOpts{})
	code, out, _ := call(t, "POST", plain.url+"/workers", "", `{"worker_id": 7, "url": "http://10.0.0.7:8000", "kv_events_endpoint": "tcp://10.0.0.7:5557"}`)
	if code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "does not ingest ZMQ") {
		t.Fatalf("without ZMQ ingestion: %d %v", code, out)
	}
}

// End to end: a registration through the API starts a zmqevents.Manager
// subscription to a mock engine, whose blocks then reach the handler.
func TestAddWorkerSubscribesToAnEngine(t *testing.T) {
	var mu sync.Mutex
	ranks := map[kv.WorkerWithDpRank]int{}
	mgr, err := zmqevents.NewManager(zmqevents.Options{BlockSize: 4, Handler: func(ev *kv.Event) {
		mu.Lock()
		defer mu.Unlock()
		ranks[ev.Worker] += len(ev.Blocks)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close() })
	g := startRig(t, rigOpts{mutate: func(o *Options) {
		o.SubscribeKVEvents = func(ep zmqevents.WorkerEndpoint) error { _, err := mgr.Ensure(ep); return err }
	}})
	pub, err := mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{Endpoint: "tcp://127.0.0.1:0", DPSize: 1, BlockSize: 4,
		Tokens: func(*kv.Event) ([]uint32, error) { return []uint32{1, 2, 3, 4}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	body := fmt.Sprintf(`{"worker_id": 9, "url": "http://127.0.0.1:9", "data_parallel_start_rank": 3, "kv_events_endpoint": %q}`, pub.Endpoint())
	if code, out, _ := call(t, "POST", g.url+"/workers", "", body); code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	// The mock engine names its rank in every batch (data_parallel_rank
	// 0), which the subscriber takes over the start rank.
	want := kv.WorkerWithDpRank{WorkerID: 9, DpRank: 0}
	var id uint64
	itu.Eventually(t, 10*time.Second, "blocks of worker 9 delivered", func() bool {
		ev := kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 9}, EventID: id, Kind: kv.EventStored,
			Blocks: []kv.StoredBlock{{BlockHash: kv.ExternalBlockHash(100 + id)}}}
		id++
		if err := pub.PublishEvent(context.Background(), &ev); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		return ranks[want] > 0
	})
}

// TestUnknownFieldsRefused: every route of the router's own API answers
// a key it does not read with a 400 naming the key, and counts it; the
// configured session field is accepted on /route only.
func TestUnknownFieldsRefused(t *testing.T) {
	s, _ := newTestServer(t, 2)
	m := s.opts.Metrics
	s.opts.SessionBodyField = "conversation"
	tests := []struct {
		path, endpoint, body, field string
	}{
		{"/route", "route", `{"token_ids":[1,2],"tokens":[3]}`, "tokens"},
		{"/route", "route", `{"Stream":true,"token_ids":[1,2]}`, "Stream"},
		{"/route", "route", `{"Token_IDs":[1,2]}`, "Token_IDs"},
		{"/free", "free", `{"Request_ID":"r"}`, "Request_ID"},
		{"/workers", "workers", `{"Worker_ID":9}`, "Worker_ID"},
		{"/route", "route", `{"prompt":"hi","max_tokens":3}`, "max_tokens"},
		{"/route", "route", `{"token_ids":[1],"session_id":"s"}`, "session_id"}, // not the configured field
		{"/route", "route", `{"token_ids":[1],"pinned_worker":{"worker_id":1,"rank":0}}`, "rank"},
		{"/free", "free", `{"request_id":"r","id":"r"}`, "id"},
		{"/prefill_done", "prefill_done", `{"request_id":"r","worker_id":1}`, "worker_id"},
		{"/overlap_scores", "overlap_scores", `{"token_ids":[1],"conversation":"s"}`, "conversation"},
		{"/potential_loads", "potential_loads", `{"token_ids":[1],"lora":"x"}`, "lora"},
		{"/workers", "workers", `{"worker_id":9,"urls":["http://10.0.0.9:8000"]}`, "urls"},
	}
	for _, tt := range tests {
		before := testutil.ToFloat64(m.BodiesRefused.WithLabelValues(tt.endpoint, "unknown_field"))
		code, out := do(t, s, "POST", tt.path, tt.body)
		if want := fmt.Sprintf("unknown field %q", tt.field); code != 400 || out["error"] != want {
			t.Errorf("POST %s %s: %d %v, want 400 %q", tt.path, tt.body, code, out, want)
		}
		if got := testutil.ToFloat64(m.BodiesRefused.WithLabelValues(tt.endpoint, "unknown_field")); got != before+1 {
			t.Errorf("POST %s %s: refusals %v, want %v", tt.path, tt.body, got, before+1)
		}
	}
	if code, out := do(t, s, "POST", "/route", `{"token_ids":[1,2],"conversation":"c1"}`); code != 200 {
		t.Fatalf("route with the session field: %d %v", code, out)
	}
	if code, _ := do(t, s, "POST", "/free", `{"request_id":"r"`); code != 400 ||
		testutil.ToFloat64(m.BodiesRefused.WithLabelValues("free", "malformed")) != 1 {
		t.Fatalf("malformed body: %d, refusals %v", code, testutil.ToFloat64(m.BodiesRefused.WithLabelValues("free", "malformed")))
	}
}
