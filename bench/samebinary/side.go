//go:build samebinary

// This file is built only by bench/cpuperop-samebinary.sh, twice: once as
// it is (the working tree's packages) and once with its imports rewritten
// to an older revision's copy of the module, so both decisions run in one
// process. See main.go.

package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// newSideNEW builds BenchmarkScheduleActor's fixture from exported calls:
// a router with 64 workers, each holding a 2k-token prefix of one of 8
// groups and busy with 4 requests, gossiping every change to an
// in-process peer that applies it.
func newSideNEW(stride int) (*side, error) {
	start := func(replica string, shards int, publish func(*messages.SequenceEvent)) (*actors.Router, error) {
		cfg := actors.DefaultConfig()
		cfg.BlockSize = blockSize
		cfg.Shards = shards
		cfg.TickInterval = 5 * time.Millisecond
		cfg.Logger = slog.New(slog.DiscardHandler)
		cfg.ReplicaID = replica
		cfg.Sequence.Stride = stride
		cfg.Publish = publish
		r, err := actors.Start(cfg)
		if err != nil {
			return nil, err
		}
		for id := uint64(1); id <= 64; id++ {
			hb := &messages.WorkerHeartbeat{WorkerId: id, Url: fmt.Sprintf("http://w%d", id), DataParallelSize: 1}
			if err := r.RegisterWorker(hb, true); err != nil {
				return nil, err
			}
		}
		return r, waitFor("workers registered", func() bool {
			reg, err := r.Registry(context.Background())
			return err == nil && len(reg.Workers) == 64
		})
	}
	peer, err := start("peer", 1, nil)
	if err != nil {
		return nil, err
	}
	r, err := start("local", 0, peer.ApplyRemote)
	if err != nil {
		return nil, err
	}
	prompts := make([][]uint32, 8)
	for g := range prompts {
		prompts[g] = prompt(4096, uint32(g))
	}
	for id := uint64(1); id <= 64; id++ {
		local := hashing.BlockHashes(prompts[id%8][:2048], blockSize, hashing.Options{})
		seq := hashing.SequenceHashes(local)
		ev := &kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id)}, Kind: kv.EventStored}
		for i := range local {
			ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[i]), TokensHash: local[i]})
		}
		r.ApplyEvent(ev)
	}
	ctx := context.Background()
	for i := range 64 * 4 {
		if _, err := r.Route(ctx, &messages.RouteRequest{RequestId: fmt.Sprintf("busy-%d", i),
			TokenIds: prompt(1024, uint32(1000+i)), UpdateStates: true}); err != nil {
			return nil, err
		}
	}
	err = waitFor("indexed", func() bool {
		reply, err := r.Route(ctx, &messages.RouteRequest{TokenIds: prompts[0]})
		return err == nil && reply.OverlapBlocks == 128
	})
	if err != nil {
		return nil, err
	}
	s := &side{stop: func() { r.Stop(); peer.Stop() }}
	s.route = func(ctx context.Context, n int64) error {
		id := "d-" + strconv.FormatInt(n, 10)
		if _, err := r.Route(ctx, &messages.RouteRequest{RequestId: id, TokenIds: prompts[n%8], UpdateStates: true}); err != nil {
			return err
		}
		return r.Free(ctx, id)
	}
	s.query = func(ctx context.Context, n int64) error {
		_, err := r.Route(ctx, &messages.RouteRequest{TokenIds: prompts[n%8]})
		return err
	}
	return s, nil
}
