package actors

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// BenchmarkScheduleActor measures one full routing decision through the
// actors: hash a 4k-token prompt, fan out to the shards and to 64 busy
// sequence actors, aggregate, select. Each of the 64 workers holds a 2k-token
// system-prompt prefix of one of 8 groups, so scores are non-trivial.
func BenchmarkScheduleActor(b *testing.B) {
	r := startRouter(b, func(c *Config) { c.Shards = 0 })
	const workers = 64
	for id := uint64(1); id <= workers; id++ {
		register(r, id)
	}
	waitWorkers(b, r, workers)
	prompts := make([][]uint32, 8)
	for g := range prompts {
		prompts[g] = prompt(4096, uint32(g))
	}
	for id := uint64(1); id <= workers; id++ {
		storeChain(r, kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id)}, prompts[id%8][:2048])
	}
	// Every rank is busy (4 requests in flight each), the worst case for
	// the fan-out: no rank can be skipped as idle.
	for i := 0; i < workers*4; i++ {
		_, err := r.Route(context.Background(), &messages.RouteRequest{
			RequestId: fmt.Sprintf("busy-%d", i), TokenIds: prompt(1024, uint32(1000+i)), UpdateStates: true,
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	eventually(b, "indexed", func() bool {
		reply, err := r.Route(context.Background(), &messages.RouteRequest{TokenIds: prompts[0]})
		return err == nil && reply.OverlapBlocks == 128
	})
	var i atomic.Int64
	var mu sync.Mutex
	lat := make([]time.Duration, 0, 1<<16)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		var local []time.Duration
		for pb.Next() {
			n := i.Add(1)
			t0 := time.Now()
			_, err := r.Route(ctx, &messages.RouteRequest{TokenIds: prompts[n%8]})
			if err != nil {
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
	b.StopTimer()
	sort.Slice(lat, func(a, c int) bool { return lat[a] < lat[c] })
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "decisions/s")
	}
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
	register(r, ids...)
	waitWorkers(b, r, 16)
	const decisionsPerBatch = 4
	hashes := make([]uint64, 32)
	n := 0
	batch := func() []*messages.SequenceEvent {
		evs := make([]*messages.SequenceEvent, 0, 3*decisionsPerBatch)
		for range decisionsPerBatch {
			n++
			id := fmt.Sprintf("o-%d", n)
			for j := range hashes {
				hashes[j] = uint64(n%64)<<32 | uint64(j)
			}
			evs = append(evs, &messages.SequenceEvent{Origin: "origin", Seq: uint64(3*n - 2), Data: &messages.SequenceEvent_Add{Add: &messages.AddRequest{
				RequestId: id, Worker: &messages.WorkerRank{WorkerId: uint64(n%16 + 1)}, SequenceHashes: slices.Clone(hashes),
				PromptBlocks: 256, Stride: 8, PrefillTokens: 4096, Isl: 4096, TrackPrefillTokens: true,
			}}})
		}
		for i := range decisionsPerBatch {
			id := fmt.Sprintf("o-%d", n-decisionsPerBatch+1+i)
			evs = append(evs,
				&messages.SequenceEvent{Origin: "origin", Data: &messages.SequenceEvent_PrefillCompleted{PrefillCompleted: &messages.MarkPrefillCompleted{RequestId: id}}},
				&messages.SequenceEvent{Origin: "origin", Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: id}}})
		}
		return evs
	}
	ctx := context.Background()
	events := 0
	for b.Loop() {
		evs := batch()
		events += len(evs)
		r.ApplyRemoteBatch(evs)
		if n%256 == 0 {
			// A query waits for the scheduler to drain what was sent.
			if _, err := r.Registry(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := r.Registry(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}
