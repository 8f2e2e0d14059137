package actors

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// The ttft cost works across replicas: what it reads of a peer's
// requests — their queued prefill, their prompts' blocks in flight, and
// the prefill completions that time each rank's throughput — arrives in
// the gossiped adds and prefill completions.
func TestTTFTCostOverGossip(t *testing.T) {
	ttft := func(id string, peer **Router) func(*Config) {
		return func(c *Config) {
			c.ReplicaID = id
			c.Scheduling.RouterCost = scheduling.CostTTFT
			c.Scheduling.TTFT.PrefillTokensPerSec = 1000
			c.Publish = func(ev *messages.SequenceEvent) {
				if *peer != nil {
					(*peer).ApplyRemote(ev)
				}
			}
		}
	}
	var a, b *Router
	a = startRouter(t, ttft("A", &b))
	b = startRouter(t, ttft("B", &a))
	register(t, a, 1, 2)
	register(t, b, 1, 2)
	ctx := ctxT(t)

	// A routes a 1,024-token prompt to worker 1; nothing is cached yet.
	doc := prompt(1024, 7)
	routed, err := a.Route(ctx, &messages.RouteRequest{RequestId: "a1", TokenIds: doc, UpdateStates: true,
		PinnedWorker: &messages.WorkerRank{WorkerId: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if routed.Worker.WorkerId != 1 {
		t.Fatalf("pinned route went to %v", routed.Worker)
	}
	// B learns of it by gossip: the prefix is in flight on worker 1 (1.0 s
	// of queued prefill, the request's own blocks cached by the time it
	// runs) against 3.1 s of uncached work weighed on idle worker 2.
	testutil.Eventually(t, 5*time.Second, "B sees A's request", func() bool {
		st, err := b.Status(ctx, false)
		return err == nil && rankStatus(st, 1).ActivePrefillTokens >= 1024
	})
	for i := range 5 {
		r, err := b.Route(ctx, &messages.RouteRequest{RequestId: fmt.Sprint("q", i), TokenIds: append(doc[:1024:1024], 5, 6, 7), UpdateStates: false})
		if err != nil {
			t.Fatal(err)
		}
		if r.Worker.WorkerId != 1 {
			t.Fatalf("query %d went to %v: B does not see A's prompt in flight on worker 1", i, r.Worker)
		}
	}

	// A's prefill completions on worker 2 time its throughput on B too:
	// each of 10 requests of 400 tokens completes 100 ms after the
	// previous one (4,000 tokens/s, give or take the test's timing).
	for i := range 10 {
		id := fmt.Sprint("w2-", i)
		if _, err := a.Route(ctx, &messages.RouteRequest{RequestId: id, TokenIds: prompt(400, uint32(100+i)), UpdateStates: true,
			PinnedWorker: &messages.WorkerRank{WorkerId: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		time.Sleep(100 * time.Millisecond)
		if err := a.MarkPrefillCompleted(ctx, fmt.Sprint("w2-", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*Router{a, b} {
		testutil.Eventually(t, 5*time.Second, "throughput measured", func() bool {
			st, err := r.Status(context.Background(), false)
			rate := 0.0
			if err == nil {
				rate = rankStatus(st, 2).PrefillTokensPerSec
			}
			return rate > 1000 && rate < 8000
		})
	}
}

func rankStatus(st *Status, worker uint64) RankStatus {
	for _, w := range st.Workers {
		if w.WorkerID == worker && len(w.Ranks) > 0 {
			return w.Ranks[0]
		}
	}
	return RankStatus{}
}

// Requests arriving together are decided concurrently (each fans out
// before the others are recorded); each decision still sees the ones
// recorded before it, as a sequential scheduler would: a burst of eight
// cold prompts spreads over eight idle ranks instead of colliding on the
// one they all see as cheapest.
func TestBurstDecisionsSeeEachOther(t *testing.T) {
	for _, cost := range []scheduling.CostModel{scheduling.CostTTFT, scheduling.CostDynamo} {
		t.Run(string(cost), func(t *testing.T) {
			r := startRouter(t, func(c *Config) { c.Scheduling.RouterCost = cost })
			register(t, r, 1, 2, 3, 4, 5, 6, 7, 8)
			ctx := ctxT(t)
			var wg sync.WaitGroup
			workers := make([]uint64, 8)
			start := make(chan struct{})
			for i := range workers {
				wg.Go(func() {
					<-start
					reply, err := r.Route(ctx, &messages.RouteRequest{RequestId: fmt.Sprint("b", i), TokenIds: prompt(2048, uint32(1000+i)), UpdateStates: true})
					if err != nil {
						t.Error(err)
						return
					}
					workers[i] = reply.Worker.WorkerId
				})
			}
			close(start)
			wg.Wait()
			seen := map[uint64]bool{}
			for _, w := range workers {
				seen[w] = true
			}
			if len(seen) != 8 {
				t.Fatalf("8 cold prompts went to %d ranks: %v", len(seen), workers)
			}
		})
	}
}
