package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

const testBlockSize = 16

func startRouter(t testing.TB, mutate func(*Config)) *Router {
	t.Helper()
	cfg := DefaultConfig()
	cfg.BlockSize = testBlockSize
	cfg.Shards = 2
	cfg.TickInterval = 5 * time.Millisecond
	cfg.shardMiddleware = []actor.ReceiverMiddleware{shardFaults}
	cfg.schedulerMiddleware = []actor.ReceiverMiddleware{schedulerFaults}
	if !testing.Verbose() {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if mutate != nil {
		mutate(&cfg)
	}
	r, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

func register(t testing.TB, r *Router, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: id, Url: fmt.Sprintf("http://w%d", id), DataParallelSize: 1}, true); err != nil {
			t.Fatal(err)
		}
	}
}

func prompt(n int, salt uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = salt*100000 + uint32(i)
	}
	return out
}

// storeChain publishes a Stored event for the prompt's full blocks.
func storeChain(r *Router, w kv.WorkerWithDpRank, tokens []uint32) {
	local := hashing.BlockHashes(tokens, testBlockSize, hashing.Options{})
	seq := hashing.SequenceHashes(local)
	ev := &kv.Event{Worker: w, Kind: kv.EventStored}
	for i := range local {
		ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[i]), TokensHash: local[i]})
	}
	r.ApplyEvent(ev)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitWorkers(t testing.TB, r *Router, n int) {
	testutil.Eventually(t, 5*time.Second, "workers registered", func() bool {
		reg, err := r.Registry(context.Background())
		return err == nil && len(reg.Workers) == n
	})
}

func TestRouteFollowsCachedPrefix(t *testing.T) {
	r := startRouter(t, nil)
	register(t, r, 1, 2)
	waitWorkers(t, r, 2)
	tokens := prompt(160, 1) // 10 blocks
	storeChain(r, kv.WorkerWithDpRank{WorkerID: 2}, tokens[:128])
	testutil.Eventually(t, 5*time.Second, "blocks indexed", func() bool {
		st, err := r.Status(context.Background(), false)
		return err == nil && st.Workers[1].Ranks[0].IndexedBlocks == 8
	})
	for i := 0; i < 5; i++ {
		reply, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: tokens, UpdateStates: false})
		if err != nil {
			t.Fatal(err)
		}
		if reply.Worker.WorkerId != 2 || reply.OverlapBlocks != 8 || reply.CachedTokens != 128 {
			t.Fatalf("got worker %d overlap %d cached %d, want 2/8/128", reply.Worker.WorkerId, reply.OverlapBlocks, reply.CachedTokens)
		}
	}
	// A removal of block 4 cuts the prefix to 4 blocks.
	local := hashing.BlockHashes(tokens, testBlockSize, hashing.Options{})
	seq := hashing.SequenceHashes(local)
	r.ApplyEvent(&kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 2}, Kind: kv.EventRemoved,
		Removed: []kv.ExternalBlockHash{kv.ExternalBlockHash(seq[4])}})
	testutil.Eventually(t, 5*time.Second, "overlap drops to 4", func() bool {
		reply, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: tokens})
		return err == nil && reply.OverlapBlocks == 4 && reply.Worker.WorkerId == 2
	})
}

func TestLoadSpreadsUncachedRequests(t *testing.T) {
	r := startRouter(t, nil)
	register(t, r, 1, 2, 3)
	waitWorkers(t, r, 3)
	counts := map[uint64]int{}
	for i := 0; i < 30; i++ {
		reply, err := r.Route(ctxT(t), &messages.RouteRequest{
			RequestId: fmt.Sprintf("r%d", i), TokenIds: prompt(256, uint32(100+i)), UpdateStates: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		counts[reply.Worker.WorkerId]++
	}
	for id := uint64(1); id <= 3; id++ {
		if counts[id] != 10 {
			t.Fatalf("equal unique prompts must spread evenly by load, got %v", counts)
		}
	}
	loads, err := r.PotentialLoads(ctxT(t), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range loads.Loads {
		if l.ActiveRequests != 10 || l.PotentialPrefillTokens != 10*256 {
			t.Fatalf("load of %v = %+v", l.Worker, l)
		}
	}
}

func TestLifecycle(t *testing.T) {
	r := startRouter(t, nil)
	register(t, r, 1)
	waitWorkers(t, r, 1)
	ctx := ctxT(t)
	first, err := r.Route(ctx, &messages.RouteRequest{RequestId: "a", TokenIds: prompt(64, 1), UpdateStates: true})
	if err != nil {
		t.Fatal(err)
	}
	// A retry of the call is answered with its decision (counted once,
	// below); another prompt under the active id is refused.
	if again, err := r.Route(ctx, &messages.RouteRequest{RequestId: "a", TokenIds: prompt(64, 1), UpdateStates: true}); err != nil ||
		again.Worker.WorkerId != first.Worker.WorkerId {
		t.Fatalf("retried call: %v %v, want worker %v", again, err, first.Worker)
	}
	if _, err := r.Route(ctx, &messages.RouteRequest{RequestId: "a", TokenIds: prompt(64, 2), UpdateStates: true}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("another prompt under an active id: got %v, want ErrBadRequest", err)
	}
	load := func() *messages.PotentialLoad {
		l, err := r.PotentialLoads(ctx, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		return l.Loads[0]
	}
	if l := load(); l.PotentialPrefillTokens != 64 || l.ActiveRequests != 1 || l.PotentialDecodeBlocks != 4 {
		t.Fatalf("after route: %+v", l)
	}
	if err := r.MarkPrefillCompleted(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if l := load(); l.PotentialPrefillTokens != 0 || l.ActiveRequests != 1 {
		t.Fatalf("after prefill done: %+v", l)
	}
	if err := r.Free(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if l := load(); l.ActiveRequests != 0 || l.PotentialDecodeBlocks != 0 {
		t.Fatalf("after free: %+v", l)
	}
	if err := r.Free(ctx, "a"); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("second free: got %v, want ErrUnknownRequest", err)
	}
	if err := r.MarkPrefillCompleted(ctx, "nope"); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("unknown prefill: got %v", err)
	}
}

func TestQueryOnlyChangesNothing(t *testing.T) {
	r := startRouter(t, nil)
	register(t, r, 1, 2)
	waitWorkers(t, r, 2)
	for i := 0; i < 10; i++ {
		if _, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: prompt(64, 7)}); err != nil {
			t.Fatal(err)
		}
	}
	loads, err := r.PotentialLoads(ctxT(t), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range loads.Loads {
		if l.ActiveRequests != 0 {
			t.Fatalf("query-only routing recorded load: %+v", l)
		}
	}
}

func TestConstraints(t *testing.T) {
	r := startRouter(t, nil)
	ctx := ctxT(t)
	if _, err := r.Route(ctx, &messages.RouteRequest{TokenIds: prompt(32, 1)}); !errors.Is(err, ErrNoEligibleWorker) {
		t.Fatalf("no workers: got %v", err)
	}
	if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: 1, DataParallelSize: 1}, true); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: 2, DataParallelStartRank: 0, DataParallelSize: 4}, true); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, r, 2)
	reply, err := r.Route(ctx, &messages.RouteRequest{TokenIds: prompt(32, 1), PinnedWorker: &messages.WorkerRank{WorkerId: 2, DpRank: 3}})
	if err != nil || reply.Worker.WorkerId != 2 || reply.Worker.DpRank != 3 {
		t.Fatalf("pinned: %v %v", reply, err)
	}
	if _, err := r.Route(ctx, &messages.RouteRequest{TokenIds: prompt(32, 1), PinnedWorker: &messages.WorkerRank{WorkerId: 2, DpRank: 9}}); !errors.Is(err, ErrNoEligibleWorker) {
		t.Fatalf("pinned to an unknown rank: %v", err)
	}
	for i := 0; i < 20; i++ {
		reply, err := r.Route(ctx, &messages.RouteRequest{RequestId: fmt.Sprint(i), UpdateStates: true,
			TokenIds: prompt(32, uint32(i)), AllowedWorkerIds: []uint64{2}})
		if err != nil || reply.Worker.WorkerId != 2 {
			t.Fatalf("allowed: %v %v", reply, err)
		}
	}
	loads, _ := r.PotentialLoads(ctx, nil, "")
	for _, l := range loads.Loads {
		if l.Worker.WorkerId == 2 && l.ActiveRequests != 5 {
			t.Fatalf("dp ranks are candidates of their own and share load: %+v", l)
		}
	}
	if _, err := r.Route(ctx, &messages.RouteRequest{TokenIds: prompt(32, 1), AllowedWorkerIds: []uint64{42}}); !errors.Is(err, ErrNoEligibleWorker) {
		t.Fatalf("allowed unknown: %v", err)
	}
	if _, err := r.Route(ctx, &messages.RouteRequest{TokenIds: nil}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("empty tokens: %v", err)
	}
}

func TestBackpressureQueuesThenRejects(t *testing.T) {
	r := startRouter(t, func(c *Config) {
		c.Scheduling.RouterQueueEnabled = true
		c.Scheduling.RouterQueueThreshold = 1
		c.Scheduling.MaxQueueLength = 1
		c.DefaultMaxNumBatchedTokens = 100
		c.MaxQueueWait = 10 * time.Second
	})
	register(t, r, 1)
	waitWorkers(t, r, 1)
	ctx := ctxT(t)
	// 200 prefill tokens > 1 x 100: the only worker is now overloaded.
	if _, err := r.Route(ctx, &messages.RouteRequest{RequestId: "big", TokenIds: prompt(200, 1), UpdateStates: true}); err != nil {
		t.Fatal(err)
	}
	queued := make(chan error, 1)
	go func() {
		_, err := r.Route(ctx, &messages.RouteRequest{RequestId: "waits", TokenIds: prompt(50, 2), UpdateStates: true})
		queued <- err
	}()
	testutil.Eventually(t, 5*time.Second, "second request queued", func() bool {
		reg, err := r.Registry(ctx)
		return err == nil && reg.QueueDepth == 1
	})
	_, err := r.Route(ctx, &messages.RouteRequest{RequestId: "rejected", TokenIds: prompt(50, 3), UpdateStates: true})
	var re *RouteError
	if !errors.As(err, &re) || !errors.Is(err, ErrOverloaded) || re.QueueDepth != 1 || re.QueueLimit != 1 {
		t.Fatalf("full queue: got %v, want ErrOverloaded with depth 1 limit 1", err)
	}
	select {
	case err := <-queued:
		t.Fatalf("queued request answered before capacity freed: %v", err)
	default:
	}
	if err := r.MarkPrefillCompleted(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-queued:
		if err != nil {
			t.Fatalf("queued request: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("queued request not routed after capacity freed")
	}
}

func TestApproximateModePredictsFromDecisions(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.UseKVEvents = false })
	register(t, r, 1, 2, 3, 4)
	waitWorkers(t, r, 4)
	tokens := prompt(320, 5)
	first, err := r.Route(ctxT(t), &messages.RouteRequest{RequestId: "x", TokenIds: tokens, UpdateStates: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Free(ctxT(t), "x"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "decision predicted as cached", func() bool {
		again, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: tokens})
		return err == nil && again.Worker.WorkerId == first.Worker.WorkerId && again.OverlapBlocks == 20
	})
	// Engine events are not mixed into the prediction.
	storeChain(r, kv.WorkerWithDpRank{WorkerID: 4}, prompt(320, 6))
	reply, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: prompt(320, 6)})
	if err != nil || reply.OverlapBlocks != 0 {
		t.Fatalf("approximate mode must ignore engine events: %v %v", reply, err)
	}
}

func TestGossipedLoadAndDeadOrigin(t *testing.T) {
	var published []*messages.SequenceEvent
	pub := make(chan *messages.SequenceEvent, 16)
	r := startRouter(t, func(c *Config) {
		c.ReplicaID = "A"
		c.Publish = func(ev *messages.SequenceEvent) { pub <- ev }
	})
	register(t, r, 1)
	waitWorkers(t, r, 1)
	ctx := ctxT(t)
	add := &messages.AddRequest{RequestId: "peer-1", Worker: &messages.WorkerRank{WorkerId: 1}, PrefillTokens: 500, Isl: 500,
		TrackPrefillTokens: true, SequenceHashes: []uint64{1, 2, 3}}
	r.ApplyRemote(&messages.SequenceEvent{Origin: "B", Data: &messages.SequenceEvent_Add{Add: add}})
	r.ApplyRemote(&messages.SequenceEvent{Origin: "A", Data: &messages.SequenceEvent_Add{Add: &messages.AddRequest{
		RequestId: "echo", Worker: &messages.WorkerRank{WorkerId: 1}, PrefillTokens: 7, Isl: 7}}})
	testutil.Eventually(t, 5*time.Second, "peer's request visible", func() bool {
		l, err := r.PotentialLoads(ctx, nil, "")
		return err == nil && l.Loads[0].ActiveRequests == 1 && l.Loads[0].PotentialPrefillTokens == 500
	})
	if _, err := r.Route(ctx, &messages.RouteRequest{RequestId: "mine", TokenIds: prompt(32, 1), UpdateStates: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-pub:
		published = append(published, ev)
	case <-time.After(2 * time.Second):
		t.Fatal("local decision not published for gossip")
	}
	if published[0].Origin != "A" || published[0].GetAdd().GetRequestId() != "mine" {
		t.Fatalf("published %+v", published[0])
	}
	r.DropOrigin("B")
	testutil.Eventually(t, 5*time.Second, "dead replica's requests dropped", func() bool {
		l, err := r.PotentialLoads(ctx, nil, "")
		return err == nil && l.Loads[0].ActiveRequests == 1 // only "mine" is left
	})
	origin := "A"
	own, seq, err := r.ActiveRequests(ctx, &origin)
	if err != nil || len(own) != 1 || own[0].GetAdd().GetRequestId() != "mine" || seq != 1 {
		t.Fatalf("own requests at seq %d: %v %v", seq, own, err)
	}
	if published[0].Seq != 1 {
		t.Fatalf("published seq %d, want 1", published[0].Seq)
	}
}

func TestShardRestartKeepsIntactIndex(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.Shards = 1 })
	register(t, r, 1)
	waitWorkers(t, r, 1)
	tokens := prompt(64, 9)
	storeChain(r, kv.WorkerWithDpRank{WorkerID: 1}, tokens)
	testutil.Eventually(t, 5*time.Second, "indexed", func() bool {
		reply, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: tokens})
		return err == nil && reply.OverlapBlocks == 4
	})
	r.system.Root.Send(r.shards[0], &crashShard{})
	testutil.Eventually(t, 5*time.Second, "shard restarted with its index", func() bool {
		stats, err := r.ShardStats(ctxT(t), false)
		return err == nil && stats[0].Restarts == 1 && len(stats[0].Blocks) == 1 && stats[0].Blocks[0].Blocks == 4
	})
	reply, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: tokens})
	if err != nil || reply.OverlapBlocks != 4 {
		t.Fatalf("after restart: %v %v", reply, err)
	}
}

func TestHeartbeatTimeoutRemovesWorker(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.HeartbeatTimeout = 50 * time.Millisecond })
	if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: 5, DataParallelSize: 1}, false); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, r, 1)
	storeChain(r, kv.WorkerWithDpRank{WorkerID: 5}, prompt(64, 1))
	testutil.Eventually(t, 5*time.Second, "worker expired", func() bool {
		reg, err := r.Registry(context.Background())
		return err == nil && len(reg.Workers) == 0
	})
	testutil.Eventually(t, 5*time.Second, "its blocks removed", func() bool {
		st, err := r.ShardStats(context.Background(), false)
		n := 0
		for _, s := range st {
			n += len(s.Blocks)
		}
		return err == nil && n == 0
	})
}

// In event mode a routed prompt is predicted as cached on its worker until
// its KV events arrive, so a burst of same-prefix requests stays together.
func TestPredictOnRoute(t *testing.T) {
	for _, ttl := range []time.Duration{0, 5 * time.Second} {
		r := startRouter(t, func(c *Config) { c.Index.PredictedTTL = ttl })
		register(t, r, 1, 2, 3)
		waitWorkers(t, r, 3)
		tokens := prompt(320, 11)
		first, err := r.Route(ctxT(t), &messages.RouteRequest{RequestId: "a", TokenIds: tokens, UpdateStates: true})
		if err != nil {
			t.Fatal(err)
		}
		want := uint32(0)
		if ttl > 0 {
			want = 20
		}
		testutil.Eventually(t, 5*time.Second, "prediction applied", func() bool {
			again, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: tokens})
			return err == nil && again.OverlapBlocks == want && (want == 0 || again.Worker.WorkerId == first.Worker.WorkerId)
		})
		// Predictions never leak into the engines' index (replicas must
		// agree on its digest).
		st, err := r.Status(ctxT(t), false)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range st.Workers {
			if w.Ranks[0].IndexedBlocks != 0 {
				t.Fatalf("ttl %v: predicted blocks counted as indexed: %+v", ttl, w)
			}
		}
	}
}

// countingObserver records degraded decisions.
type countingObserver struct {
	NopObserver
	degraded chan string
}

func (o countingObserver) DecisionDegraded(reason string) {
	select {
	case o.degraded <- reason:
	default:
	}
}

// twoShardFixture is a router with two shards and a 50 ms decision
// timeout whose worker 1 holds the 4 blocks of the prompt it returns.
func twoShardFixture(t *testing.T, obs Observer) (*Router, []uint32) {
	t.Helper()
	r := startRouter(t, func(c *Config) {
		c.Shards = 2
		c.DecisionTimeout = 50 * time.Millisecond
		if obs != nil {
			c.Observer = obs
		}
	})
	register(t, r, 1, 2)
	waitWorkers(t, r, 2)
	tokens := prompt(64, 3)
	storeChain(r, kv.WorkerWithDpRank{WorkerID: 1}, tokens)
	testutil.Eventually(t, 5*time.Second, "indexed", func() bool {
		reply, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: tokens})
		return err == nil && reply.OverlapBlocks == 4
	})
	return r, tokens
}

// A slow shard does not hang a decision: after DecisionTimeout the
// scheduler decides with what arrived (the slow shard's workers count as
// holding nothing) and reports it as degraded.
func TestSlowShardDoesNotHangDecisions(t *testing.T) {
	obs := countingObserver{degraded: make(chan string, 4)}
	r, tokens := twoShardFixture(t, obs)
	slow := shardOf(1, 2)
	stalled := make(chan struct{})
	r.system.Root.Send(r.shards[slow], &stallShard{d: 500 * time.Millisecond, entered: stalled})
	<-stalled
	start := time.Now()
	reply, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: tokens})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > 400*time.Millisecond {
		t.Fatalf("decision waited %v for a stalled shard", took)
	}
	if reply.OverlapBlocks != 0 {
		t.Fatalf("the stalled shard's overlap cannot be known: got %d", reply.OverlapBlocks)
	}
	select {
	case reason := <-obs.degraded:
		if reason != "shard_timeout" {
			t.Fatalf("degraded reason %q", reason)
		}
	case <-time.After(time.Second):
		t.Fatal("degraded decision not reported")
	}
}

// A decision made without a held shard's answer does not hand its block
// hashes to the next decision: the held shard reads them when it is let
// go, and must read the prompt it was asked about. Recycling the slice on
// timeout made the held shard score the later prompts' hashes.
func TestTimedOutDecisionKeepsItsHashes(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][][]uint64{} // by shard: its score requests' hashes when it read them
	record := func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
			if m, ok := env.Message.(*messages.ScoreRequest); ok {
				mu.Lock()
				seen[ctx.Self().Id] = append(seen[ctx.Self().Id], slices.Clone(m.LocalHashes))
				mu.Unlock()
			}
			next(ctx, env)
		}
	}
	r := startRouter(t, func(c *Config) {
		c.Shards = 2
		c.DecisionTimeout = 50 * time.Millisecond
		c.shardMiddleware = append(c.shardMiddleware, record)
	})
	held := r.shards[0].Id
	register(t, r, 1, 2)
	waitWorkers(t, r, 2)

	release := make(chan struct{})
	r.system.Root.Send(r.shards[0], &holdShard{release: release})
	prompts := make([][]uint32, 4)
	for i := range prompts {
		prompts[i] = prompt(8*testBlockSize, uint32(100+i))
		if _, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: prompts[i]}); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	testutil.Eventually(t, 5*time.Second, "the held shard read every request", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen[held]) >= len(prompts)
	})
	mu.Lock()
	defer mu.Unlock()
	for i, p := range prompts {
		want := kv.LocalHashesAsUint64(hashing.BlockHashes(p, testBlockSize, hashing.Options{}))
		if !slices.Equal(seen[held][i], want) {
			t.Fatalf("request %d: the held shard scored other hashes than its prompt's", i)
		}
	}
}

// A request routed on predicted blocks still counts their prefill: the
// engine has not stored them yet, so it computes them.
func TestPredictedOverlapStillCountsPrefill(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.Index.PredictedTTL = 5 * time.Second })
	register(t, r, 1)
	waitWorkers(t, r, 1)
	tokens := prompt(320, 12)
	if _, err := r.Route(ctxT(t), &messages.RouteRequest{RequestId: "a", TokenIds: tokens, UpdateStates: true}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "prediction applied", func() bool {
		again, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: tokens})
		return err == nil && again.OverlapBlocks == 20
	})
	if _, err := r.Route(ctxT(t), &messages.RouteRequest{RequestId: "b", TokenIds: tokens, UpdateStates: true}); err != nil {
		t.Fatal(err)
	}
	loads, err := r.PotentialLoads(ctxT(t), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := loads.Loads[0].PotentialPrefillTokens; got != 2*320 {
		t.Fatalf("prefill load %d, want both prompts in full (640)", got)
	}
}

// A client that left after its request was recorded (its answer is lost,
// so nobody will free it) gets the request freed and the free gossiped; a
// cancel with another call's token leaves a re-used id alone.
func TestCancelAfterRecordFreesTheRequest(t *testing.T) {
	var mu sync.Mutex
	var published []*messages.SequenceEvent
	r := startRouter(t, func(c *Config) {
		c.Publish = func(ev *messages.SequenceEvent) { mu.Lock(); published = append(published, ev); mu.Unlock() }
	})
	register(t, r, 1)
	waitWorkers(t, r, 1)
	for _, tc := range []struct {
		token, cancelToken uint64
		wantTracked        uint64
	}{{7, 7, 0}, {8, 99, 1}} {
		id := fmt.Sprintf("req-%d", tc.token)
		res, err := r.system.Root.RequestFuture(r.scheduler, &messages.RouteRequest{
			RequestId: id, TokenIds: prompt(64, 1), UpdateStates: true, CancelToken: tc.token,
		}, 5*time.Second).Result()
		if err != nil || res.(*messages.RouteReply).Worker.WorkerId != 1 {
			t.Fatalf("route: %v %v", res, err)
		}
		r.system.Root.Send(r.scheduler, &messages.CancelRoute{CancelToken: tc.cancelToken, RequestId: id})
		testutil.Eventually(t, 5*time.Second, "request freed or kept", func() bool {
			reg, err := r.Registry(ctxT(t))
			return err == nil && reg.TrackedRequests == tc.wantTracked
		})
		if err := r.Free(ctxT(t), id); tc.wantTracked == 1 && err != nil {
			t.Fatalf("kept request could not be freed: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	frees := 0
	for _, ev := range published {
		if ev.GetFree() != nil {
			frees++
		}
	}
	if frees != 2 { // the cancelled request's and the kept one's explicit free
		t.Fatalf("published %d frees, want 2", frees)
	}
}

// Registering a fleet publishes a handful of rank tables, not one per
// worker (each table lists every rank, so one per worker was O(n²)); a
// registration that waits is answered once the table holds its worker.
func TestRegistrationsCoalesce(t *testing.T) {
	r := startRouter(t, nil)
	const n = 2000
	for id := uint64(1); id < n; id++ {
		if err := r.AnnounceWorker(&messages.WorkerHeartbeat{WorkerId: id, DataParallelSize: 1}, false); err != nil {
			t.Fatal(err)
		}
	}
	register(t, r, n)
	if _, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: prompt(64, 1), PinnedWorker: &messages.WorkerRank{WorkerId: n}}); err != nil {
		t.Fatalf("the waited-for worker must be routable at once: %v", err)
	}
	reg, err := r.Registry(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(reg.Workers) != n || reg.TablesPublished > 50 {
		t.Fatalf("%d workers registered with %d rank tables; want %d with a few", len(reg.Workers), reg.TablesPublished, n)
	}
	t.Logf("%d workers, %d rank tables", n, reg.TablesPublished)
}

// A scheduler its supervisor restarted is a fresh instance with no ranks;
// it asks the registry for the rank table, so routing resumes at once
// instead of waiting for the fleet's next change.
func TestSchedulerRestartGetsTheRanksBack(t *testing.T) {
	r := startRouter(t, nil)
	register(t, r, 1, 2)
	waitWorkers(t, r, 2)
	ctx := ctxT(t)
	if _, err := r.Route(ctx, &messages.RouteRequest{TokenIds: prompt(64, 1)}); err != nil {
		t.Fatal(err)
	}
	r.system.Root.Send(r.scheduler, &crashScheduler{})
	testutil.EventuallyNil(t, 3*time.Second, func() error {
		_, err := r.Route(ctx, &messages.RouteRequest{RequestId: "after", TokenIds: prompt(64, 2), UpdateStates: true})
		return err
	})
	// The board is rebuilt too: the recorded request shows in the loads.
	testutil.EventuallyNil(t, 3*time.Second, func() error {
		loads, err := r.PotentialLoads(ctx, nil, "")
		if err != nil {
			return err
		}
		var active uint32
		for _, l := range loads.Loads {
			active += l.ActiveRequests
		}
		if active != 1 {
			return fmt.Errorf("%d active requests in the loads, want the one routed after the restart", active)
		}
		return nil
	})
}

// An announcement keeps its static flag: a fleet announced at once with
// static set outlives the heartbeat timeout (kvbench's indexer announces
// 1,000 workers and sends no heartbeats), one without it expires.
func TestAnnouncedStaticWorkersDoNotExpire(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.HeartbeatTimeout = 100 * time.Millisecond })
	for id := uint64(1); id <= 3; id++ {
		if err := r.AnnounceWorker(&messages.WorkerHeartbeat{WorkerId: id, DataParallelSize: 1}, id != 3); err != nil {
			t.Fatal(err)
		}
	}
	waitWorkers(t, r, 3)
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		reg, err := r.Registry(ctxT(t))
		if err != nil {
			return err
		}
		var ids []uint64
		for _, w := range reg.Workers {
			if !w.Static {
				return fmt.Errorf("worker %d registered without its static flag", w.GetWorker().GetWorkerId())
			}
			ids = append(ids, w.GetWorker().GetWorkerId())
		}
		if len(ids) != 2 || slices.Contains(ids, 3) {
			return fmt.Errorf("workers %v; want 1 and 2 (static) left after the heartbeat timeout, 3 expired", ids)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // three more timeouts: the static ones stay
	if reg, err := r.Registry(ctxT(t)); err != nil || len(reg.Workers) != 2 {
		t.Fatalf("static workers expired: %v %v", reg, err)
	}
}
