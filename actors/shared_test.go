package actors

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// chainEvent is the Stored event of the prompt's full blocks on a tier.
func chainEvent(w kv.WorkerID, tier kv.StorageTier, tokens []uint32) *kv.Event {
	local := hashing.BlockHashes(tokens, testBlockSize, hashing.Options{})
	seq := hashing.SequenceHashes(local)
	ev := &kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: w}, Tier: tier, Kind: kv.EventStored}
	for i := range local {
		ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[i]), TokensHash: local[i]})
	}
	return ev
}

// The shared prefix is the max over the shards' answers: two stores on
// different shards, holding 3 and 7 blocks of the prompt, give 7. An
// unregistered, undeclared publisher's shared-tier events wait in the
// holdback like its device events (they cannot grow the index), and a
// declared store cannot register as a worker.
func TestSharedPrefixAcrossShards(t *testing.T) {
	storeA := kv.WorkerID(900)
	storeB := storeA + 1
	for shardOf(storeB, 2) == shardOf(storeA, 2) {
		storeB++
	}
	r := startRouter(t, func(c *Config) {
		c.Index.SharedStores = index.SharedStores{storeA: {}, storeB: {}}
	})
	register(t, r, 1)
	waitWorkers(t, r, 1)
	if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: uint64(storeA), DataParallelSize: 1}, true); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("store registration: %v, want ErrBadRequest", err)
	}
	// An unregistered publisher on storeB's shard: its event is sent
	// first, so once storeB's 7 blocks are seen it has been handled.
	unreg := kv.WorkerID(55)
	for shardOf(unreg, 2) != shardOf(storeB, 2) {
		unreg++
	}
	tokens := prompt(160, 7)
	r.ApplyEvent(chainEvent(unreg, kv.TierShared, tokens))       // held: 10 blocks if it were applied
	r.ApplyEvent(chainEvent(storeA, kv.TierDevice, tokens[:48])) // a store's medium does not matter
	r.ApplyEvent(chainEvent(storeB, kv.TierShared, tokens[:112]))

	shared := func() (uint32, error) {
		reply, err := r.OverlapScores(context.Background(), tokens, "")
		if err != nil {
			return 0, err
		}
		if ranks := reply.GetRanks(); len(ranks.GetWorkerIds()) != 1 || ranks.DeviceBlocks[0] != 0 {
			return 0, fmt.Errorf("overlaps %v: only worker 1, with no device blocks", ranks)
		}
		return reply.SharedBlocks, nil
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		n, err := shared()
		if err == nil && n != 7 {
			err = fmt.Errorf("shared prefix %d, want 7", n)
		}
		return err
	})
	// The publisher registers: its held shared blocks (the whole prompt)
	// apply.
	register(t, r, uint64(unreg))
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		reply, err := r.OverlapScores(context.Background(), tokens, "")
		if err == nil && reply.SharedBlocks != 10 {
			err = fmt.Errorf("shared prefix %d after the publisher registered, want 10", reply.SharedBlocks)
		}
		return err
	})
	reg, err := r.Registry(context.Background())
	if err != nil || len(reg.Workers) != 2 {
		t.Fatalf("registry %v, %v: the stores must not be workers", reg, err)
	}
}
