package natsbus

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
)

// What an engine publishes, in either wire form, singly or batched, is
// what the router's sources hand on.
func TestPublisherToSources(t *testing.T) {
	for _, protobuf := range []bool{false, true} {
		name := "json"
		if protobuf {
			name = "protobuf"
		}
		t.Run(name, func(t *testing.T) {
			e := startServer(t)
			nc := dial(t, e)
			var c collector
			src, err := StartEventSource(context.Background(), nc, EventSourceConfig{Stream: "KV_PUB", Log: quiet}, c.handle)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			hbs := make(chan events.Heartbeat, 1)
			hsrc, err := StartHeartbeatSource(nc, "", quiet, func(hb events.Heartbeat) { hbs <- hb })
			if err != nil {
				t.Fatal(err)
			}
			defer hsrc.Close()

			pub := NewPublisher(dial(t, e), PublisherConfig{Protobuf: protobuf})
			want := []kv.Event{
				rankEvent(5, 1, 0),
				{Worker: kv.WorkerWithDpRank{WorkerID: 5, DpRank: 1}, EventID: 1, Tier: kv.TierHostPinned, Kind: kv.EventRemoved,
					Removed: []kv.ExternalBlockHash{1 << 63, 2}},
				{Worker: kv.WorkerWithDpRank{WorkerID: 5, DpRank: 1}, EventID: 2, Kind: kv.EventCleared},
			}
			if err := pub.PublishEvent(&want[0]); err != nil {
				t.Fatal(err)
			}
			if err := pub.PublishEvents(want[1:]); err != nil {
				t.Fatal(err)
			}
			if err := pub.PublishEvents(nil); err != nil {
				t.Fatal(err)
			}
			if err := pub.PublishEvent(&kv.Event{Kind: kv.EventStored}); err == nil {
				t.Fatal("an invalid event was published")
			}
			hb := events.Heartbeat{WorkerID: 5, URL: "http://w:1", DataParallelStartRank: 1, DataParallelSize: 2, BlockSize: 16}
			if err := pub.PublishHeartbeat(hb); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := pub.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, waitTimeout, "three events", func() bool { return c.len() == len(want) })
			c.mu.Lock()
			got := append([]kv.Event(nil), c.evs...)
			c.mu.Unlock()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v\nwant %+v", got, want)
			}
			if st := src.Stats(); st.Messages != 2 || st.Gaps != 0 || len(st.Malformed) != 0 {
				t.Fatalf("stats %+v: want the batch as one message", st)
			}
			select {
			case got := <-hbs:
				if got != hb {
					t.Fatalf("heartbeat %+v, want %+v", got, hb)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no heartbeat")
			}
		})
	}
}

// A heartbeat published without a dp size announces one rank.
func TestPublisherHeartbeatDefaultsDpSize(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	hbs := make(chan events.Heartbeat, 1)
	hsrc, err := StartHeartbeatSource(nc, "w", quiet, func(hb events.Heartbeat) { hbs <- hb })
	if err != nil {
		t.Fatal(err)
	}
	defer hsrc.Close()
	if err := NewPublisher(nc, PublisherConfig{WorkersSubject: "w"}).PublishHeartbeat(events.Heartbeat{WorkerID: 9}); err != nil {
		t.Fatal(err)
	}
	select {
	case hb := <-hbs:
		if hb.WorkerID != 9 || hb.DataParallelSize != 1 {
			t.Fatalf("heartbeat %+v", hb)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no heartbeat")
	}
}
