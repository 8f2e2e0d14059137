package natsbus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
)

func startServer(t *testing.T) *Embedded {
	t.Helper()
	e, err := StartEmbedded(EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), JetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

func dial(t *testing.T, e *Embedded) *nats.Conn {
	t.Helper()
	nc, err := Connect(context.Background(), e.ClientURL(), "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// collector records handled events.
type collector struct {
	mu  sync.Mutex
	evs []kv.Event
}

func (c *collector) handle(ev *kv.Event) {
	c.mu.Lock()
	c.evs = append(c.evs, *ev)
	c.mu.Unlock()
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.evs)
}

// waitTimeout bounds every wait for events in this package's tests.
const waitTimeout = 10 * time.Second

func stored(worker uint64, id uint64) kv.Event {
	return kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(worker)}, EventID: id, Kind: kv.EventStored,
		Blocks: []kv.StoredBlock{{BlockHash: kv.ExternalBlockHash(id + 1), TokensHash: kv.LocalBlockHash(id + 100)}}}
}

func publishJSON(t *testing.T, nc *nats.Conn, subject string, ev kv.Event) {
	t.Helper()
	data, err := events.EncodeRouterEventJSON(&ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(subject, data); err != nil {
		t.Fatal(err)
	}
}

func TestEventSourceDecodesBothFormsAndSurvivesGarbage(t *testing.T) {
	for _, stream := range []string{"", "KV_TEST"} {
		t.Run(fmt.Sprintf("stream=%q", stream), func(t *testing.T) {
			e := startServer(t)
			nc := dial(t, e)
			var c collector
			src, err := StartEventSource(context.Background(), nc, EventSourceConfig{
				Subject: "kv.events", Stream: stream, MaxAge: time.Hour, Log: slog.New(slog.DiscardHandler),
			}, c.handle)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			wantMode := "subscription"
			if stream != "" {
				wantMode = "jetstream"
			}
			if src.Mode() != wantMode {
				t.Fatalf("mode %s, want %s", src.Mode(), wantMode)
			}
			publishJSON(t, nc, "kv.events", stored(1, 0))
			_ = nc.Publish("kv.events", []byte(`{"garbage":`))
			pb, _ := events.EncodeProtoBatch([]kv.Event{stored(1, 1), stored(1, 3)})
			_ = nc.Publish("kv.events.pb", pb)
			_ = nc.Publish("kv.events.pb", []byte{0xff, 0x00})
			msg := nats.NewMsg("kv.events")
			msg.Header.Set("Content-Type", ProtobufContentType)
			msg.Data, _ = events.EncodeProtoBatch([]kv.Event{stored(2, 0)})
			_ = nc.PublishMsg(msg)
			// Two subscriptions (the subject and its children) deliver on
			// their own goroutines, and a message is counted before it is
			// decoded: wait until all five were handled, not just until
			// the fourth event arrived.
			testutil.Eventually(t, waitTimeout, "4 events and 2 drops", func() bool {
				st := src.Stats()
				return c.len() == 4 && st.Malformed["json"]+st.Malformed["protobuf"] == 2
			})
			st := src.Stats()
			if st.Malformed["json"] != 1 || st.Malformed["protobuf"] != 1 || st.Gaps != 1 || st.Events != 4 {
				t.Fatalf("stats %+v", st)
			}
			if !src.Ready() {
				t.Fatal("not ready")
			}
		})
	}
}

// A replica that starts late replays the stream in order and becomes
// ready only once it caught up.
func TestLateSourceReplaysInOrder(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	cfg := EventSourceConfig{Subject: "kv.events", Stream: "KV_REPLAY", MaxAge: time.Hour, Log: slog.New(slog.DiscardHandler)}
	var first collector
	src1, err := StartEventSource(context.Background(), nc, cfg, first.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer src1.Close()
	const n = 1000
	for i := 0; i < n; i++ {
		publishJSON(t, nc, "kv.events", stored(uint64(i%4), uint64(i/4)))
	}
	testutil.Eventually(t, waitTimeout, "live source got everything", func() bool { return first.len() == n })
	var late collector
	src2, err := StartEventSource(context.Background(), dial(t, e), cfg, late.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	testutil.Eventually(t, waitTimeout, "late source replayed and ready", func() bool { return late.len() == n && src2.Ready() })
	for i, ev := range late.evs {
		if ev.EventID != uint64(i/4) || ev.Worker.WorkerID != kv.WorkerID(i%4) {
			t.Fatalf("replay out of order at %d: %+v", i, ev)
		}
	}
	if g := src2.Stats().Gaps; g != 0 {
		t.Fatalf("replay reported %d gaps", g)
	}
}

func TestHeartbeatSource(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	got := make(chan events.Heartbeat, 4)
	h, err := StartHeartbeatSource(nc, "workers", slog.New(slog.DiscardHandler), func(hb events.Heartbeat) { got <- hb })
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_ = nc.Publish("workers", []byte(`{"worker_id":"x"}`))
	_ = nc.Publish("workers", []byte(`{"worker_id":5,"url":"http://w"}`))
	select {
	case hb := <-got:
		if hb.WorkerID != 5 || hb.URL != "http://w" {
			t.Fatalf("heartbeat %+v", hb)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no heartbeat")
	}
	testutil.Eventually(t, waitTimeout, "malformed counted", func() bool { _, bad := h.Stats(); return bad == 1 })
}
