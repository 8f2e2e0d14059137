package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
)

// TestSnapshotBeforeStreamBound: a stream of few but large messages
// never reaches router_snapshot_threshold, so its byte bound would
// discard events; past half of --kv-events-max-bytes the snapshot replica
// snapshots and purges, and a replica started afterwards has the index.
func TestSnapshotBeforeStreamBound(t *testing.T) {
	first := StartReplica(t, func(c *config.Config) {
		c.KVEventsMaxBytes = 64 << 10 // the threshold (1 M messages) stays far
		c.SnapshotInterval = 50 * time.Millisecond
		c.StaticWorkers = []string{"1=http://127.0.0.1:9"}
	})
	base := BaseURL(first)
	nc := connect(t, first)
	for i := range 40 { // ~1.5 kB each: ~60 kB in all
		publish(t, nc, "kvrouter.kv_events", storedEvent(1, uint64(i), tokens(256, uint32(i)), uint64(1000*i)))
		time.Sleep(5 * time.Millisecond) // let the snapshot loop look in between
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if _, m := Get(t, base+"/metrics"); metricSum(m, "kvrouter_index_snapshots_total") < 1 {
			return fmt.Errorf("no snapshot")
		}
		return nil
	})
	var want uint64
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		w := workers(t, base)
		if len(w.Workers) != 1 || w.Workers[0].Ranks[0].IndexedBlocks != 40*16 {
			return fmt.Errorf("index: %+v", w.Workers)
		}
		want = w.IndexDigest
		return nil
	})
	late := StartReplica(t, func(c *config.Config) {
		c.NATSURL = first.NATSURL()
		c.StaticWorkers = []string{"1=http://127.0.0.1:9"}
	})
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if got := workers(t, BaseURL(late)).IndexDigest; got != want {
			return fmt.Errorf("late replica digest %d, want %d", got, want)
		}
		return nil
	})
}
