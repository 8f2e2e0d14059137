package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/sequence"
)

// The scheduler reads loads from the ranks' publications and asks only
// the ranks whose roots share the prompt's prefix. Whatever mix of own
// decisions, prefill completions, frees and peers' requests came before,
// the potential loads it reports must equal those computed from scratch
// from the ranks' active requests (rebuilt in a fresh tracker: an
// independent reference), for prompts that share prefixes with active
// requests and prompts that share none.
func TestPublishedLoadsMatchTheRanks(t *testing.T) {
	const workers, stride = 6, 2
	r := startRouter(t, func(c *Config) { c.ReplicaID = "A"; c.Sequence.Stride = stride })
	for id := uint64(1); id <= workers; id++ {
		register(t, r, id)
	}
	waitWorkers(t, r, workers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(3, 4))
	// Prompts share one of 5 system prefixes (4 blocks), then differ.
	promptOf := func(group, salt int) []uint32 {
		p := prompt(testBlockSize*(4+rng.IntN(6)), uint32(1000+salt))
		copy(p, prompt(4*testBlockSize, uint32(group)))
		return p
	}
	sampledOf := func(tokens []uint32) ([]uint64, uint32) {
		seqs := hashing.SequenceHashes(hashing.BlockHashes(tokens, testBlockSize, hashing.Options{}))
		var out []uint64
		for _, h := range sequence.Sample(seqs, stride) {
			out = append(out, uint64(h))
		}
		return out, uint32(len(seqs))
	}
	var own, peers []string
	for step := range 400 {
		switch op := rng.IntN(10); {
		case op < 4:
			id := fmt.Sprintf("own-%d", step)
			if _, err := r.Route(ctx, &messages.RouteRequest{RequestId: id, TokenIds: promptOf(rng.IntN(5), step), UpdateStates: true}); err != nil {
				t.Fatal(err)
			}
			own = append(own, id)
		case op < 6:
			id := fmt.Sprintf("peer-%d", step)
			tokens := promptOf(rng.IntN(5), step)
			hashes, blocks := sampledOf(tokens)
			r.ApplyRemote(&messages.SequenceEvent{Origin: "B", Data: &messages.SequenceEvent_Add{Add: &messages.AddRequest{
				RequestId: id, Worker: &messages.WorkerRank{WorkerId: uint64(1 + rng.IntN(workers))}, SequenceHashes: hashes,
				PromptBlocks: blocks, Stride: stride, PrefillTokens: uint64(len(tokens)), Isl: uint64(len(tokens)), TrackPrefillTokens: true,
			}}})
			peers = append(peers, id)
		case op < 7 && len(own) > 0:
			if err := r.MarkPrefillCompleted(ctx, own[rng.IntN(len(own))]); err != nil {
				t.Fatal(err)
			}
		case op < 9 && len(own) > 0:
			i := rng.IntN(len(own))
			if err := r.Free(ctx, own[i]); err != nil {
				t.Fatal(err)
			}
			own = append(own[:i], own[i+1:]...)
		case len(peers) > 0:
			i := rng.IntN(len(peers))
			r.ApplyRemote(&messages.SequenceEvent{Origin: "B", Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: peers[i]}}})
			peers = append(peers[:i], peers[i+1:]...)
		}
		if step%80 != 79 {
			continue
		}
		probes := [][]uint32{promptOf(0, 9000), promptOf(3, 9001), prompt(5*testBlockSize, 7777)}
		testutil.EventuallyNil(t, 5*time.Second, func() error {
			return compareLoads(ctx, r, probes, sampledOf)
		})
	}
}

func compareLoads(ctx context.Context, r *Router, probes [][]uint32, sampledOf func([]uint32) ([]uint64, uint32)) error {
	events, _, err := r.ActiveRequests(ctx, nil)
	if err != nil {
		return err
	}
	ref := map[kv.WorkerWithDpRank]*sequence.ActiveSequences{}
	cfg := r.Config().Sequence
	for _, ev := range events {
		if add := ev.GetAdd(); add != nil {
			w := rankOf(add.Worker)
			if ref[w] == nil {
				ref[w] = sequence.New(cfg)
			}
			if err := ref[w].AddRequest(requestOf(add, ev.Origin), time.Now()); err != nil {
				return err
			}
		}
	}
	for _, ev := range events {
		if done := ev.GetPrefillCompleted(); done != nil {
			for _, s := range ref {
				_ = s.MarkPrefillCompleted(done.RequestId) // on the rank that holds it
			}
		}
	}
	for _, tokens := range probes {
		loads, err := r.PotentialLoads(ctx, tokens, "")
		if err != nil {
			return err
		}
		hashes, blocks := sampledOf(tokens)
		for _, l := range loads.Loads {
			w := rankOf(l.Worker)
			s := ref[w]
			if s == nil {
				s = sequence.New(cfg)
			}
			want := s.Load()
			newBlocks := sequence.CountNewBlocks(s, hashes, uint64(blocks))
			if l.ActiveRequests != uint32(want.ActiveRequests) ||
				l.PotentialPrefillTokens != want.ActivePrefillTokens+uint64(len(tokens)) ||
				l.PotentialDecodeBlocks != want.ActiveBlocks+float64(newBlocks) {
				return fmt.Errorf("rank %v: reported %d requests, %d prefill tokens, %.1f decode blocks; the ranks' requests give %d, %d, %.1f",
					w, l.ActiveRequests, l.PotentialPrefillTokens, l.PotentialDecodeBlocks,
					want.ActiveRequests, want.ActivePrefillTokens+uint64(len(tokens)), want.ActiveBlocks+float64(newBlocks))
			}
		}
	}
	return nil
}
