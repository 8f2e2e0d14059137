package actors

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/kv"
)

type restartObserver struct {
	NopObserver
	intact chan bool
}

func (o restartObserver) ShardRestarted(_ uint32, intact bool) { o.intact <- intact }

// Lookups running while events are ingested never see half an event: each
// 4-block chain is only ever stored or removed whole, so any score other
// than 0 or 4 would be a half-applied event. Afterwards the shards hold
// exactly what a sequential replay of the same events builds, and their
// trees pass CheckInvariants (checked by crashing each shard: a restart
// validates the index it keeps). Run with -race.
func TestConcurrentIngestAndLookupsKeepIndexWhole(t *testing.T) {
	const shards, chains, events = 2, 12, 2000
	obs := restartObserver{intact: make(chan bool, shards)}
	r := startRouter(t, func(c *Config) {
		c.Shards = shards
		c.Observer = obs
	})
	workers := []uint64{1, 2, 3, 4, 5, 6}
	register(t, r, workers...)
	waitWorkers(t, r, len(workers))

	prompts := make([][]uint32, chains)
	local := make([][]kv.LocalBlockHash, chains)
	seqs := make([][]kv.SequenceHash, chains)
	for c := range chains {
		prompts[c] = prompt(4*testBlockSize, uint32(c+1))
		local[c] = hashing.BlockHashes(prompts[c], testBlockSize, hashing.Options{})
		seqs[c] = hashing.SequenceHashes(local[c])
	}
	// The event stream and its sequential replay, shard by shard.
	refs := make([]*index.Indexer, shards)
	for i := range refs {
		refs[i] = index.New()
	}
	rng := rand.New(rand.NewPCG(3, 4))
	held := map[[2]int]bool{}
	stream := make([]*kv.Event, 0, events)
	for i := range events {
		w, c := int(workers[rng.IntN(len(workers))]), rng.IntN(chains)
		ev := &kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(w)}, EventID: uint64(i + 1)}
		if held[[2]int{w, c}] {
			ev.Kind = kv.EventRemoved
			for _, s := range seqs[c] {
				ev.Removed = append(ev.Removed, kv.ExternalBlockHash(s))
			}
		} else {
			ev.Kind = kv.EventStored
			for j, s := range seqs[c] {
				ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(s), TokensHash: local[c][j]})
			}
		}
		held[[2]int{w, c}] = !held[[2]int{w, c}]
		if err := refs[shardOf(kv.WorkerID(w), shards)].Apply(ev); err != nil {
			t.Fatalf("reference replay, event %d: %v", i, err)
		}
		stream = append(stream, ev)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var torn []uint32
	lookups := 0
	for q := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				reply, err := r.OverlapScores(ctx, prompts[(i*7+q)%chains], "")
				if err != nil {
					t.Errorf("lookup: %v", err)
					return
				}
				mu.Lock()
				lookups++
				for _, d := range reply.GetRanks().GetDeviceBlocks() {
					if d != 0 && d != 4 {
						torn = append(torn, d)
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, ev := range stream {
		r.ApplyEvent(ev)
	}
	if err := r.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	close(done)
	wg.Wait()
	if len(torn) > 0 {
		t.Fatalf("%d lookups saw a half-applied chain (overlaps %v)", len(torn), torn[:min(len(torn), 8)])
	}
	if lookups == 0 {
		t.Fatal("no lookup ran during the ingest")
	}

	var want uint64
	for _, ref := range refs {
		want += ref.Digest()
	}
	got, err := r.IndexDigest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("index digest %x after concurrent ingest, sequential replay gives %x", got, want)
	}
	for i := range shards {
		r.system.Root.Send(r.shards[i], &crashShard{})
		if !<-obs.intact {
			t.Fatalf("shard %d: index failed CheckInvariants after concurrent ingest and lookups", i)
		}
	}
}
