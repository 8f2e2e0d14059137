package actors

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"google.golang.org/protobuf/proto"
)

// scheduleFixture is a router with 64 workers, each holding a 2k-token
// system-prompt prefix of one of 8 groups (so scores are non-trivial), and
// every rank busy with 4 requests in flight: the worst case for the
// fan-out, since no rank can be skipped as idle. It returns the 8 4k-token
// prompts the benchmarks route.
func scheduleFixture(b *testing.B, mutate func(*Config)) (*Router, [][]uint32) {
	r := startRouter(b, func(c *Config) {
		c.Shards = 0
		if mutate != nil {
			mutate(c)
		}
	})
	const workers = 64
	for id := uint64(1); id <= workers; id++ {
		register(b, r, id)
	}
	waitWorkers(b, r, workers)
	prompts := make([][]uint32, 8)
	for g := range prompts {
		prompts[g] = prompt(4096, uint32(g))
	}
	for id := uint64(1); id <= workers; id++ {
		storeChain(r, kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id)}, prompts[id%8][:2048])
	}
	for i := 0; i < workers*4; i++ {
		_, err := r.Route(context.Background(), &messages.RouteRequest{
			RequestId: fmt.Sprintf("busy-%d", i), TokenIds: prompt(1024, uint32(1000+i)), UpdateStates: true,
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	testutil.Eventually(b, 5*time.Second, "indexed", func() bool {
		reply, err := r.Route(context.Background(), &messages.RouteRequest{TokenIds: prompts[0]})
		return err == nil && reply.OverlapBlocks == 128
	})
	return r, prompts
}

// runDecisions runs decide in parallel and reports decisions/s and the
// p99 latency of one decide call.
func runDecisions(b *testing.B, decide func(ctx context.Context, n int64) error) {
	var i atomic.Int64
	var mu sync.Mutex
	lat := make([]time.Duration, 0, 1<<16)
	b.ResetTimer()
	start := time.Now()
	cpu0 := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		var local []time.Duration
		for pb.Next() {
			n := i.Add(1)
			t0 := time.Now()
			if err := decide(ctx, n); err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-us/op")
	sort.Slice(lat, func(a, c int) bool { return lat[a] < lat[c] })
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "decisions/s")
	}
}

// BenchmarkScheduleActor measures whole routing decisions as the proxy
// makes them: hash a 4k-token prompt, fan out to the shards and to 64 busy
// sequence actors, aggregate, select, record the request on its rank and
// gossip the add to a peer replica (a second in-process router applying
// it), then free it (applied and gossiped too). One decision = one Route
// with update_states and its Free; the latency is their sum.
func BenchmarkScheduleActor(b *testing.B) { benchmarkScheduleActor(b, 1) }

// BenchmarkScheduleActorStride8 is the same decision at the router's
// default router-active-sequence-stride (8; the actors' own default and
// Dynamo's is 1): the add, its gossip and the peer's apply carry 32
// hashes instead of 256.
func BenchmarkScheduleActorStride8(b *testing.B) { benchmarkScheduleActor(b, 8) }

// BenchmarkScheduleActorStride8NoPeer is BenchmarkScheduleActorStride8
// with no peer applying the gossip: each gossiped event is marshalled as
// the cluster's sender marshals a batch (into a reused buffer) and
// dropped, so the CPU is the deciding replica's alone. The difference
// from BenchmarkScheduleActorStride8 is what one peer pays to apply a
// decision's gossip.
func BenchmarkScheduleActorStride8NoPeer(b *testing.B) {
	var mu sync.Mutex
	var buf []byte
	batch := &messages.SequenceEventBatch{Events: make([]*messages.SequenceEvent, 1)}
	r, prompts := scheduleFixture(b, func(c *Config) {
		c.ReplicaID = "local"
		c.Sequence.Stride = 8
		c.Publish = func(ev *messages.SequenceEvent) {
			mu.Lock()
			defer mu.Unlock()
			batch.Events[0] = ev
			var err error
			if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], batch); err != nil {
				b.Error(err)
			}
		}
	})
	runDecisions(b, routeAndFree(r, prompts))
}

func benchmarkScheduleActor(b *testing.B, stride int) {
	peer := startRouter(b, func(c *Config) { c.ReplicaID = "peer"; c.Shards = 1; c.Sequence.Stride = stride })
	for id := uint64(1); id <= 64; id++ {
		register(b, peer, id)
	}
	waitWorkers(b, peer, 64)
	r, prompts := scheduleFixture(b, func(c *Config) {
		c.ReplicaID = "local"
		c.Publish = peer.ApplyRemote
		c.Sequence.Stride = stride
	})
	runDecisions(b, routeAndFree(r, prompts))
}

// routeAndFree is one decision with state updates as the proxy makes it:
// a Route that records the request on its rank, then its Free.
func routeAndFree(r *Router, prompts [][]uint32) func(context.Context, int64) error {
	return func(ctx context.Context, n int64) error {
		id := "d-" + strconv.FormatInt(n, 10)
		if _, err := r.Route(ctx, &messages.RouteRequest{RequestId: id, TokenIds: prompts[n%8], UpdateStates: true}); err != nil {
			return err
		}
		return r.Free(ctx, id)
	}
}

// BenchmarkScheduleActorSticky is BenchmarkScheduleActor with every
// request a later request of one of 1,000 sticky sessions, bound before
// the timer starts (the binding read at the start of the decision, the
// candidates narrowed to the bound rank, the use recorded at the end):
// what sessions add to a decision.
func BenchmarkScheduleActorSticky(b *testing.B) {
	peer := startRouter(b, func(c *Config) { c.ReplicaID = "peer"; c.Shards = 1 })
	for id := uint64(1); id <= 64; id++ {
		register(b, peer, id)
	}
	waitWorkers(b, peer, 64)
	r, prompts := scheduleFixture(b, func(c *Config) {
		c.ReplicaID = "local"
		c.Publish = peer.ApplyRemote
	})
	for n := range int64(1000) {
		id := "bind-" + strconv.FormatInt(n, 10)
		req := &messages.RouteRequest{RequestId: id, TokenIds: prompts[n%8], UpdateStates: true,
			SessionId: "session-" + strconv.FormatInt(n, 10)}
		if _, err := r.Route(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		if err := r.Free(context.Background(), id); err != nil {
			b.Fatal(err)
		}
	}
	runDecisions(b, func(ctx context.Context, n int64) error {
		id := "d-" + strconv.FormatInt(n, 10)
		req := &messages.RouteRequest{RequestId: id, TokenIds: prompts[n%8], UpdateStates: true,
			SessionId: "session-" + strconv.FormatInt(n%1000, 10)}
		if _, err := r.Route(ctx, req); err != nil {
			return err
		}
		return r.Free(ctx, id)
	})
}

// BenchmarkScheduleActorQueryOnly is the same decision without state
// updates (update_states false: no add, no free, no gossip), as
// /route answers a query that only asks where a prompt would go.
func BenchmarkScheduleActorQueryOnly(b *testing.B) {
	r, prompts := scheduleFixture(b, nil)
	runDecisions(b, func(ctx context.Context, n int64) error {
		_, err := r.Route(ctx, &messages.RouteRequest{TokenIds: prompts[n%8]})
		return err
	})
}

// BenchmarkApplyRemote measures what a peer replica spends in the actors
// on another replica's decisions: batches of gossiped add, prefill-done and
// free events (stride 8: 32 hashes per 4k-token prompt) applied to 16
// workers' sequence actors. ns/event excludes network and decoding.
func BenchmarkApplyRemote(b *testing.B) {
	r := startRouter(b, func(c *Config) {
		c.ReplicaID = "peer"
		c.Sequence.Stride = 8
	})
	ids := make([]uint64, 16)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	register(b, r, ids...)
	waitWorkers(b, r, 16)
	const decisionsPerBatch = 4
	// The batches are built before the timer starts: a ring of 256, each
	// adding and freeing its own 4 requests, so a batch can be sent again
	// once the ring wraps (messages are never mutated after Send).
	ring := make([][]*messages.SequenceEvent, 256)
	n := 0
	for k := range ring {
		evs := make([]*messages.SequenceEvent, 0, 3*decisionsPerBatch)
		for range decisionsPerBatch {
			n++
			hashes := make([]uint64, 32)
			for j := range hashes {
				hashes[j] = uint64(n%64)<<32 | uint64(j)
			}
			evs = append(evs, &messages.SequenceEvent{Origin: "origin", Seq: uint64(3*n - 2), Data: &messages.SequenceEvent_Add{Add: &messages.AddRequest{
				RequestId: fmt.Sprintf("o-%d", n), Worker: &messages.WorkerRank{WorkerId: uint64(n%16 + 1)}, SequenceHashes: hashes,
				PromptBlocks: 256, Stride: 8, PrefillTokens: 4096, Isl: 4096, TrackPrefillTokens: true,
			}}})
		}
		for i := range decisionsPerBatch {
			id := fmt.Sprintf("o-%d", n-decisionsPerBatch+1+i)
			evs = append(evs,
				&messages.SequenceEvent{Origin: "origin", Data: &messages.SequenceEvent_PrefillCompleted{PrefillCompleted: &messages.MarkPrefillCompleted{RequestId: id}}},
				&messages.SequenceEvent{Origin: "origin", Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: id}}})
		}
		ring[k] = evs
	}
	ctx := context.Background()
	events := 0
	k := 0
	for b.Loop() {
		evs := ring[k%len(ring)]
		events += len(evs)
		r.ApplyRemoteBatch(evs)
		if k++; k%len(ring) == 0 {
			// A query waits for the replication edge to drain what was
			// sent, so the ring's requests are freed before it wraps.
			if _, err := r.Registry(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	// Every batch freed what it added: nothing may be left on any rank.
	st, err := r.Status(ctx, false)
	if err != nil {
		b.Fatal(err)
	}
	for _, w := range st.Workers {
		for _, rk := range w.Ranks {
			if rk.ActiveRequests != 0 {
				b.Fatalf("worker %d rank %d holds %d requests after every batch freed its own", w.WorkerID, rk.DpRank, rk.ActiveRequests)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}

// BenchmarkDecisionBound is the irreducible work of the decisions above
// (the lower bound a decision's cost is compared with): hash one of the same 4k-token prompts (block and
// sequence hashes) and walk an index holding the same 64 workers'
// 2k-token prefixes, on one goroutine with no actors. A decision's CPU
// time divided by this one's says what the actors, the load fan-out, the
// selection and the bookkeeping cost on top.
func BenchmarkDecisionBound(b *testing.B) {
	x := index.New()
	prompts := make([][]uint32, 8)
	for g := range prompts {
		prompts[g] = prompt(4096, uint32(g))
	}
	for id := uint64(1); id <= 64; id++ {
		tokens := prompts[id%8][:2048]
		local := hashing.BlockHashes(tokens, testBlockSize, hashing.Options{})
		seq := hashing.SequenceHashes(local)
		ev := &kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id)}, Kind: kv.EventStored}
		for i := range local {
			ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[i]), TokensHash: local[i]})
		}
		if err := x.Apply(ev); err != nil {
			b.Fatal(err)
		}
	}
	n := 0
	for b.Loop() {
		local := hashing.BlockHashes(prompts[n%8], testBlockSize, hashing.Options{})
		_ = hashing.SequenceHashes(local)
		m := x.FindMatches(local)
		if got := m[kv.WorkerWithDpRank{WorkerID: kv.WorkerID(8 + n%8)}].Device; got != 128 {
			b.Fatalf("prompt %d: worker %d overlap %d, want 128", n%8, 8+n%8, got)
		}
		n++
	}
}

// BenchmarkShardIngest is the shards' cost per KV event (sent, applied,
// awaited): each op stores 256 distinct 16-block chains over 16 workers
// and removes them again, so the index stays the same size. turns=1 is
// the shards' yield after every couple of messages, turns=300 protoactor's
// default; run with -count to interleave them.
func BenchmarkShardIngest(b *testing.B) {
	for _, turns := range []int{shardTurns, 300} {
		b.Run("turns="+strconv.Itoa(turns), func(b *testing.B) {
			r := startRouter(b, func(c *Config) { c.Shards = 0; c.shardTurns = turns })
			const workers, chains = 16, 256
			ids := make([]uint64, workers)
			for i := range ids {
				ids[i] = uint64(i + 1)
			}
			register(b, r, ids...)
			waitWorkers(b, r, workers)
			var stored, removed []*kv.Event
			for c := range chains {
				w := kv.WorkerWithDpRank{WorkerID: kv.WorkerID(c%workers + 1)}
				local := hashing.BlockHashes(prompt(16*testBlockSize, uint32(c+1)), testBlockSize, hashing.Options{})
				seq := hashing.SequenceHashes(local)
				st := &kv.Event{Worker: w, Kind: kv.EventStored}
				rm := &kv.Event{Worker: w, Kind: kv.EventRemoved}
				for j := range local {
					st.Blocks = append(st.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[j]), TokensHash: local[j]})
					rm.Removed = append(rm.Removed, kv.ExternalBlockHash(seq[j]))
				}
				stored, removed = append(stored, st), append(removed, rm)
			}
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				for _, ev := range stored {
					r.ApplyEvent(ev)
				}
				for _, ev := range removed {
					r.ApplyEvent(ev)
				}
				if err := r.Barrier(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*2*chains)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkRegisterFleet registers 7,000 single-rank workers one after
// another, each call waiting until the scheduler's table holds its worker
// (as static registrations and discovery do): one op is the whole fleet.
func BenchmarkRegisterFleet(b *testing.B) {
	const n = 7000
	for b.Loop() {
		b.StopTimer()
		r := startRouter(b, nil)
		b.StartTimer()
		for id := uint64(1); id <= n; id++ {
			if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: id, DataParallelSize: 1}, true); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		r.Stop()
		b.StartTimer()
	}
}

// processCPU is the user+system CPU the whole process has used: the
// benchmark's goroutines and every actor, the GC and the runtime's
// spinning threads, which wall time per op cannot separate from waiting.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
