package test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
)

// TestRestartKeepsIndex: a replica with embedded NATS + JetStream is
// stopped and started again on the same --data-dir with another (random)
// replica id, as a restart without --replica-id does. It comes back with
// the same index: the snapshot it stored, then the stream after it, from
// the JetStream store under the data dir. (The store path used to carry
// the random replica id, so a restart started from an empty store.)
func TestRestartKeepsIndex(t *testing.T) {
	dir := t.TempDir()
	setup := func(c *config.Config) {
		c.DataDir = dir
		c.ReplicaID = "" // a random id per start, as without --replica-id
		// Registered before ingestion starts, so the replay is indexed
		// even where events of unregistered workers are held back.
		c.StaticWorkers = []string{"1=http://127.0.0.1:9", "2=http://127.0.0.1:9"}
		c.RouterSnapshotThreshold = 50
		c.SnapshotInterval = 100 * time.Millisecond
	}
	first := StartReplica(t, setup)
	base := BaseURL(first)
	nc := connect(t, first)
	for i := range 120 {
		publish(t, nc, "kvrouter.kv_events", storedEvent(uint64(1+i%2), uint64(i/2), tokens(64, uint32(i)), uint64(1000*i)))
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if _, m := Get(t, base+"/metrics"); metricSum(m, "kvrouter_index_snapshots_total") < 1 {
			return fmt.Errorf("no snapshot yet")
		}
		return nil
	})
	// Events after the snapshot: only the stream has them.
	for i := 120; i < 130; i++ {
		publish(t, nc, "kvrouter.kv_events", storedEvent(2, uint64(i), tokens(64, uint32(i)), uint64(1000*i)))
	}
	// Worker 1 evicts its first chain (4 blocks).
	publish(t, nc, "kvrouter.kv_events", `{"worker_id":1,"event":{"event_id":60,"data":{"removed":{"block_hashes":[0]}}}}`)
	var want uint64
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		w := workers(t, base)
		if len(w.Workers) != 2 || w.Workers[1].Ranks[0].IndexedBlocks != 70*4 || w.Workers[0].Ranks[0].IndexedBlocks != 60*4-4 {
			return fmt.Errorf("index not complete yet: %+v", w.Workers)
		}
		want = w.IndexDigest
		return nil
	})
	firstID := first.ID()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	nc.Close()

	second := StartReplica(t, setup)
	if second.ID() == firstID {
		t.Fatalf("restart kept replica id %s; the test needs a new one", firstID)
	}
	sbase := BaseURL(second)
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if code, body := Get(t, sbase+"/readyz"); code != http.StatusOK {
			return fmt.Errorf("restarted replica not ready: %s", body)
		}
		if got := workers(t, sbase).IndexDigest; got != want {
			return fmt.Errorf("restarted replica digest %d, want %d", got, want)
		}
		return nil
	})
}
