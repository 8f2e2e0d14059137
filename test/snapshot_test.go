package test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
)

// TestSnapshotBoundsTheStream: past router_snapshot_threshold messages the
// replica snapshots its index and purges the stream; a replica started
// afterwards loads the snapshot, reads the rest of the stream, and ends
// with the same index.
func TestSnapshotBoundsTheStream(t *testing.T) {
	first := StartReplica(t, func(c *config.Config) {
		c.RouterSnapshotThreshold = 50
		c.SnapshotInterval = 100 * time.Millisecond
	})
	base := BaseURL(first)
	nc := connect(t, first)
	publish(t, nc, "kvrouter.workers", heartbeat(1))
	publish(t, nc, "kvrouter.workers", heartbeat(2))
	for i := 0; i < 120; i++ {
		publish(t, nc, "kvrouter.kv_events", storedEvent(uint64(1+i%2), uint64(i/2), tokens(64, uint32(i)), uint64(1000*i)))
	}
	// One removal, so the snapshot is not just the stores.
	publish(t, nc, "kvrouter.kv_events", `{"worker_id":1,"event":{"event_id":60,"data":{"removed":{"block_hashes":[0]}}}}`)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		_, m := Get(t, base+"/metrics")
		if metricSum(m, "kvrouter_index_snapshots_total") < 1 {
			return fmt.Errorf("no snapshot yet")
		}
		st, err := js.Stream(t.Context(), "KVROUTER_KV_EVENTS")
		if err != nil {
			return err
		}
		info, err := st.Info(t.Context())
		if err != nil {
			return err
		}
		if info.State.Msgs > 50 {
			return fmt.Errorf("stream still holds %d messages", info.State.Msgs)
		}
		return nil
	})
	// Events after the snapshot.
	for i := 120; i < 130; i++ {
		publish(t, nc, "kvrouter.kv_events", storedEvent(2, uint64(i), tokens(64, uint32(i)), uint64(1000*i)))
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		w := workers(t, base).Workers
		if len(w) != 2 {
			return fmt.Errorf("first replica lists %d workers", len(w))
		}
		if n := w[1].Ranks[0].IndexedBlocks; n != 70*4 {
			return fmt.Errorf("first replica: worker 2 has %d blocks", n)
		}
		return nil
	})
	want := workers(t, base).IndexDigest

	late := StartReplica(t, func(c *config.Config) { c.NATSURL = first.NATSURL() })
	lbase := BaseURL(late)
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		// Workers heartbeat periodically; the late replica indexes their
		// replayed events once it has heard from them (until then they
		// are held, not indexed).
		publish(t, nc, "kvrouter.workers", heartbeat(1))
		publish(t, nc, "kvrouter.workers", heartbeat(2))
		if code, body := Get(t, lbase+"/readyz"); code != http.StatusOK {
			return fmt.Errorf("late replica not ready: %s", body)
		}
		if got := workers(t, lbase).IndexDigest; got != want {
			return fmt.Errorf("late replica digest %d, want %d", got, want)
		}
		return nil
	})
}
