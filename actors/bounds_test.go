package actors

import (
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// dropObserver counts dropped events and backlog drops by reason.
type dropObserver struct {
	NopObserver
	mu      sync.Mutex
	dropped map[string]int
}

func (o *dropObserver) EventDropped(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropped[reason]++
}

func (o *dropObserver) BacklogDropped(queue string) { o.EventDropped("backlog_" + queue) }

func (o *dropObserver) count(reason string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped[reason]
}

func indexedBlocks(t *testing.T, r *Router, w kv.WorkerWithDpRank) uint64 {
	stats, err := r.ShardStats(ctxT(t), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		for _, b := range s.Blocks {
			if rankOf(b.Worker) == w {
				return b.Blocks
			}
		}
	}
	return 0
}

// Events of a worker that has not registered are held, not indexed, and
// applied in order once it registers; past the block bound they are
// dropped and counted, and held events expire after the hold age.
func TestUnregisteredWorkerEventsAreHeld(t *testing.T) {
	obs := &dropObserver{dropped: map[string]int{}}
	r := startRouter(t, func(c *Config) {
		c.Shards = 1
		c.Index.HoldBlocks = 12
		c.Index.HoldAge = 300 * time.Millisecond
		c.Observer = obs
	})
	w1, w2, w3 := kv.WorkerWithDpRank{WorkerID: 1}, kv.WorkerWithDpRank{WorkerID: 2}, kv.WorkerWithDpRank{WorkerID: 3}
	storeChain(r, w1, prompt(128, 1)) // 8 blocks: held
	storeChain(r, w2, prompt(128, 2)) // 8 more would pass the bound of 12: dropped
	if err := r.Barrier(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if n := indexedBlocks(t, r, w1); n != 0 {
		t.Fatalf("an unregistered worker's blocks were indexed: %d", n)
	}
	if obs.count("unregistered_worker") != 1 {
		t.Fatalf("dropped %v, want one unregistered_worker", obs.dropped)
	}
	register(t, r, 1)
	testutil.Eventually(t, 5*time.Second, "held blocks applied on registration", func() bool {
		return indexedBlocks(t, r, w1) == 8
	})
	storeChain(r, w3, prompt(64, 3)) // held, never registered: expires
	testutil.Eventually(t, 5*time.Second, "held event expired", func() bool {
		return obs.count("unregistered_worker_expired") == 1
	})
	register(t, r, 3)
	if err := r.Barrier(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if n := indexedBlocks(t, r, w3); n != 0 {
		t.Fatalf("an expired event was applied: %d blocks", n)
	}
}

// A held event keeps its own blocks: the shard decodes every event into
// one scratch event, so holding that without a copy would leave the held
// event naming whatever the shard decoded next.
func TestHeldEventsSurviveTheNextDecode(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.Shards = 1 })
	register(t, r, 2)
	w1, w2 := kv.WorkerWithDpRank{WorkerID: 1}, kv.WorkerWithDpRank{WorkerID: 2}
	storeChain(r, w1, prompt(128, 1)) // held: worker 1 is not registered
	storeChain(r, w2, prompt(128, 2)) // applied, decoded into the same scratch
	if err := r.Barrier(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	register(t, r, 1)
	depth := func(tokens []uint32, w kv.WorkerWithDpRank) uint32 {
		reply, err := r.OverlapScores(ctxT(t), tokens, "")
		if err != nil {
			t.Fatal(err)
		}
		rows := reply.GetRanks()
		for i, id := range rows.GetWorkerIds() {
			if kv.WorkerID(id) == w.WorkerID {
				return rows.GetDeviceBlocks()[i]
			}
		}
		return 0
	}
	testutil.Eventually(t, 5*time.Second, "held blocks applied on registration", func() bool {
		return indexedBlocks(t, r, w1) == 8
	})
	if d1, d2 := depth(prompt(128, 1), w1), depth(prompt(128, 2), w1); d1 != 8 || d2 != 0 {
		t.Fatalf("worker 1 matches its own prompt to %d blocks and worker 2's to %d; want 8 and 0", d1, d2)
	}
}

// A full replication backlog drops peers' events (counted) instead of
// growing the mailbox; anti-entropy repairs what was dropped.
func TestReplicationBacklogIsBounded(t *testing.T) {
	obs := &dropObserver{dropped: map[string]int{}}
	r := startRouter(t, func(c *Config) { c.ReplicationBacklog = 4; c.Observer = obs })
	register(t, r, 1)
	r.replBacklog.tryAdd(4) // the edge is behind by its whole bound
	r.ApplyRemoteBatch([]*messages.SequenceEvent{{Origin: "peer", Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: "x"}}}})
	r.ApplyRemote(&messages.SequenceEvent{Origin: "peer", Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: "y"}}})
	if n := obs.count("backlog_replication"); n != 2 {
		t.Fatalf("dropped %d, want 2", n)
	}
	r.replBacklog.done(4)
	r.ApplyRemote(&messages.SequenceEvent{Origin: "peer", Data: &messages.SequenceEvent_Add{Add: &messages.AddRequest{
		RequestId: "z", Worker: &messages.WorkerRank{WorkerId: 1}, Isl: 16, Stride: 1}}})
	testutil.Eventually(t, 5*time.Second, "applied once there is room", func() bool {
		reg, err := r.Registry(ctxT(t))
		return err == nil && reg.TrackedRequests == 1
	})
	if r.replBacklog.n.Load() != 0 {
		t.Fatalf("backlog %d after the edge caught up", r.replBacklog.n.Load())
	}
}
