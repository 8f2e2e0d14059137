package natsbus

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
)

var quiet = slog.New(slog.DiscardHandler)

func rankEvent(worker uint64, rank uint32, id uint64) kv.Event {
	ev := stored(worker, id)
	ev.Worker.DpRank = rank
	return ev
}

// Event ids are tracked per (worker, dp_rank): skipped ids count as gaps,
// ids that step back (replay, engine restart) as reordered, and every
// event is applied either way.
func TestEventSourceTracksEventIDsPerRank(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	var c collector
	src, err := StartEventSource(context.Background(), nc, EventSourceConfig{Subject: "kv.ids", Log: quiet}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	seq := []kv.Event{
		rankEvent(1, 0, 0), rankEvent(1, 0, 1),
		rankEvent(1, 1, 7), // another rank: its first id, no gap
		rankEvent(1, 0, 5), // 2, 3, 4 lost
		rankEvent(2, 0, 3), // another worker: first id
		rankEvent(1, 0, 5), // duplicate
		rankEvent(1, 0, 0), // engine restart
		rankEvent(1, 0, 1),
		rankEvent(1, 1, 9), // 8 lost
	}
	for _, ev := range seq {
		publishJSON(t, nc, "kv.ids", ev)
	}
	testutil.Eventually(t, waitTimeout, "all events", func() bool { return c.len() == len(seq) })
	st := src.Stats()
	if st.Gaps != 4 || st.Reordered != 2 || st.Events != uint64(len(seq)) || st.Messages != uint64(len(seq)) {
		t.Fatalf("stats %+v, want 4 gaps, 2 reordered, %d events", st, len(seq))
	}
}

// Garbage of every kind is dropped and counted; the subscription keeps
// delivering what follows.
func TestEventSourceSurvivesGarbageFirst(t *testing.T) {
	for _, stream := range []string{"", "KV_GARBAGE"} {
		t.Run("stream="+stream, func(t *testing.T) {
			e := startServer(t)
			nc := dial(t, e)
			var c collector
			src, err := StartEventSource(context.Background(), nc, EventSourceConfig{Subject: "kv.g", Stream: stream, Log: quiet}, c.handle)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			for _, g := range []string{"", "{", "null", `{"worker_id":1}`, `[{"worker_id":1,"event":{"data":"cleared"}},7]`, "\xff\xfe"} {
				if err := nc.Publish("kv.g", []byte(g)); err != nil {
					t.Fatal(err)
				}
			}
			if err := nc.Publish("kv.g.pb", []byte{0x0a, 0x02, 0x08}); err != nil {
				t.Fatal(err)
			}
			publishJSON(t, nc, "kv.g", stored(3, 0))
			testutil.Eventually(t, waitTimeout, "the valid event after the garbage", func() bool { return c.len() == 1 })
			st := src.Stats()
			if st.Malformed["json"] != 6 || st.Malformed["protobuf"] != 1 || st.Events != 1 || st.Messages != 8 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// A server without JetStream still serves events, live only.
func TestEventSourceFallsBackWithoutJetStream(t *testing.T) {
	e, err := StartEmbedded(EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc := dial(t, e)
	var c collector
	src, err := StartEventSource(context.Background(), nc, EventSourceConfig{Stream: DefaultStream, Log: quiet}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Mode() != ModeSubscription || !src.Ready() {
		t.Fatalf("mode %s ready %v, want a ready plain subscription", src.Mode(), src.Ready())
	}
	publishJSON(t, nc, DefaultEventsSubject, stored(1, 0))
	testutil.Eventually(t, waitTimeout, "event on the default subject", func() bool { return c.len() == 1 })
}

// The stream gets the configured names and a 1 h age limit by default.
func TestEventSourceCreatesStreamWithDefaults(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	src, err := StartEventSource(context.Background(), nc, EventSourceConfig{Stream: DefaultStream, Log: quiet}, func(*kv.Event) {})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(context.Background(), DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	if cfg.MaxAge != DefaultMaxAge || len(cfg.Subjects) != 2 || cfg.Subjects[0] != DefaultEventsSubject || cfg.Subjects[1] != DefaultEventsSubject+".>" {
		t.Fatalf("stream config: max age %s, subjects %v", cfg.MaxAge, cfg.Subjects)
	}
	if src.Mode() != ModeJetStream || !src.Ready() {
		t.Fatalf("mode %s ready %v on an empty stream", src.Mode(), src.Ready())
	}
}

// After Close returns the handler is never called again.
func TestEventSourceCloseStopsDelivery(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	var calls atomic.Int64
	src, err := StartEventSource(context.Background(), nc, EventSourceConfig{Subject: "kv.c", Log: quiet}, func(*kv.Event) { calls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	publishJSON(t, nc, "kv.c", stored(1, 0))
	testutil.Eventually(t, waitTimeout, "first event", func() bool { return calls.Load() == 1 })
	src.Close()
	src.Close()
	for i := range 50 {
		publishJSON(t, nc, "kv.c", stored(1, uint64(i+1)))
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// A second subscriber on the same subject proves the messages went
	// out; the closed source must still be at one call.
	var c collector
	probe, err := StartEventSource(context.Background(), nc, EventSourceConfig{Subject: "kv.c", Log: quiet}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	publishJSON(t, nc, "kv.c", stored(1, 99))
	testutil.Eventually(t, waitTimeout, "probe event", func() bool { return c.len() == 1 })
	if n := calls.Load(); n != 1 {
		t.Fatalf("closed source handled %d events, want 1", n)
	}
}

// A replica replaying a stream whose old messages are purged under it (a
// snapshot by another replica) must still become ready, not wait for the
// next live event.
func TestReplayReadyWhenBacklogPurged(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	cfg := EventSourceConfig{Subject: "kv.p", Stream: "KV_PURGE", Log: quiet}
	var first collector
	src1, err := StartEventSource(context.Background(), nc, cfg, first.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer src1.Close()
	const n = 3000
	for i := range n {
		publishJSON(t, nc, "kv.p", stored(1, uint64(i)))
	}
	testutil.Eventually(t, waitTimeout, "stream holds everything", func() bool { return first.len() == n })

	blocked := make(chan struct{})
	release := make(chan struct{})
	var late atomic.Int64
	src2, err := StartEventSource(context.Background(), dial(t, e), cfg, func(*kv.Event) {
		if late.Add(1) == 1 {
			close(blocked)
			<-release
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	<-blocked
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(context.Background(), "KV_PURGE")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(release)
	testutil.Eventually(t, waitTimeout, "ready after the purge", src2.Ready)
	if got := late.Load(); got >= n {
		t.Fatalf("late source read all %d events: the purge came too late to test anything", got)
	}
	publishJSON(t, nc, "kv.p", stored(1, n))
	testutil.Eventually(t, waitTimeout, "live event after the purge", func() bool { return first.len() == n+1 })
	testutil.Eventually(t, 5*time.Second, "the purged messages to be counted as a stream gap", func() bool {
		return src2.Stats().StreamGaps > 0
	})
}
