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
