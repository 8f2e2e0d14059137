package natsbus

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/kv"
)

// BenchmarkIngestJSON measures the whole path an engine's event takes:
// encode, publish, embedded server, subscription, decode, handler. Each
// event stores 16 blocks.
func BenchmarkIngestJSON(b *testing.B) {
	e, err := StartEmbedded(EmbeddedConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Shutdown()
	log := slog.New(slog.DiscardHandler)
	sub, err := Connect(context.Background(), e.ClientURL(), "bench-sub", log)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	// The default pending limit (64k messages) would drop events while
	// the decoder catches up with a burst.
	var handled atomic.Int64
	src, err := StartEventSource(context.Background(), sub, EventSourceConfig{Subject: "bench", Log: log}, func(*kv.Event) { handled.Add(1) })
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	for _, s := range []*nats.Subscription{src.sub, src.extra} {
		if err := s.SetPendingLimits(-1, -1); err != nil {
			b.Fatal(err)
		}
	}
	pubConn, err := Connect(context.Background(), e.ClientURL(), "bench-pub", log)
	if err != nil {
		b.Fatal(err)
	}
	defer pubConn.Close()
	pub := NewPublisher(pubConn, PublisherConfig{EventsSubject: "bench"})
	ev := stored(1, 0)
	for i := range 15 {
		ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(i) << 40, TokensHash: kv.LocalBlockHash(i) << 41})
	}
	// b.Loop times only the publishing; events/s is measured to the last
	// event handled.
	start := time.Now()
	for b.Loop() {
		ev.EventID++
		if err := pub.PublishEvent(&ev); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for handled.Load() < int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("handled %d of %d events", handled.Load(), b.N)
		}
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	if st := src.Stats(); st.Gaps != 0 {
		b.Fatalf("lost events: %+v", st)
	}
}
