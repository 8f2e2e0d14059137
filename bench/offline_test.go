package bench

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	decider "github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sequence"
)

// An offline replay runs a workload through mock engine ranks in model
// time (no HTTP, no real clock, no other load on the machine) with the
// router's own decision (package decide, the state machine the scheduler
// actor drives) on candidates built from what the router would know — each rank's KV events (zero delay), its
// sequence.ActiveSequences, its scheduling.PrefillRate fed by prefill
// completions. It is how the ttft cost's defaults were chosen; the
// tables in the README come from kvbench's real runs.
//
//	KVBENCH_OFFLINE=shared-prefix QPS=8,40,64 go test ./bench -run TestOfflineReplay -v
//
// STRIDE sets router-active-sequence-stride (default 1, the sequence
// package's; the router's is 8).
//
// Workloads: shared-prefix (the demo's shape), multi-turn (30
// conversations of 5 turns), mooncake (the first 1,500 trace requests);
// the first requests warm the caches as in the README's runs (120, 150
// and 300). SEED picks the schedule.

// offlineRank is one engine rank and the router's view of it.
type offlineRank struct {
	engine   *mockengine.Rank
	index    map[kv.SequenceHash]struct{} // stored blocks, from the rank's events
	seqs     *sequence.ActiveSequences
	rate     scheduling.PrefillRate
	inFlight *mockengine.Batch
}

type offlineResult struct {
	hit           float64
	p50, p90, p99 float64 // TTFT, ms of model time
}

// offlineReplay routes reqs over ranks engines of config cfg with the scheduling
// config sc, or round-robin / least-loaded when policy says so; the
// first warmup requests are not counted.
func offlineReplay(t testing.TB, cfg mockengine.Config, ranks int, reqs []Request, warmup int, policy string, sc scheduling.Config, seqCfg sequence.Config) offlineResult {
	t.Helper()
	stride := seqCfg.EffectiveStride()
	base := time.Unix(0, 0)
	rs := make([]*offlineRank, ranks)
	for i := range rs {
		rr := &offlineRank{index: map[kv.SequenceHash]struct{}{}, seqs: sequence.New(seqCfg)}
		c := cfg
		c.WorkerID = kv.WorkerID(i + 1)
		engine, err := mockengine.NewRank(c, 0, func(ev kv.Event) {
			switch ev.Kind {
			case kv.EventStored:
				for _, b := range ev.Blocks {
					rr.index[kv.SequenceHash(b.BlockHash)] = struct{}{}
				}
			case kv.EventRemoved:
				for _, h := range ev.Removed {
					delete(rr.index, kv.SequenceHash(h))
				}
			case kv.EventCleared:
				clear(rr.index)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		rr.engine = engine
		rs[i] = rr
	}
	dec, err := decider.New(decider.Config{Scheduling: sc, Limits: scheduling.Limits{}, BlockSize: cfg.BlockSize,
		Stride: stride, TrackActiveBlocks: true}, [2]uint64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	view := offlineRanks(ranks)
	index := make(map[string]int, len(reqs))
	arrival := make(map[string]time.Duration, len(reqs))
	var ttfts []float64
	var prompt, cached, next, rrNext int
	for {
		stepRank, stepEnd := -1, time.Duration(0)
		for i, r := range rs {
			if r.inFlight != nil && (stepRank < 0 || r.engine.Now()+r.inFlight.Duration < stepEnd) {
				stepRank, stepEnd = i, r.engine.Now()+r.inFlight.Duration
			}
		}
		switch {
		case next < len(reqs) && (stepRank < 0 || modelTime(reqs[next].Arrival, cfg) <= stepEnd):
			rq := reqs[next]
			now := modelTime(rq.Arrival, cfg)
			index[rq.ID], arrival[rq.ID] = next, now
			next++
			seqs := hashing.SequenceHashes(hashing.BlockHashes(rq.Tokens, cfg.BlockSize, hashing.Options{}))
			cands := make([]scheduling.Candidate, ranks)
			for i, r := range rs {
				cands[i] = r.candidate(i, seqs, stride, base.Add(now), uint64(cfg.TotalKVBlocks))
			}
			pick, uncached := -1, uint64(0)
			switch policy {
			case PolicyRoundRobin:
				pick, rrNext = rrNext%ranks, rrNext+1
			case PolicyLeastLoaded:
				pick = 0
				for k := 1; k <= ranks; k++ {
					i := (rrNext + k) % ranks
					if k == 1 || cands[i].ActiveRequests < cands[pick].ActiveRequests {
						pick = i
					}
				}
				rrNext = pick
			default:
				add := offlineDecide(t, dec, view, rq, cands, len(seqs), base.Add(now))
				pick, uncached = int(add.Worker.WorkerID)-1, add.PrefillTokens
			}
			if policy == PolicyRoundRobin || policy == PolicyLeastLoaded {
				// A baseline policy's request is recorded as the router
				// would record it: its uncached prompt as prefill.
				uncached = uint64(len(rq.Tokens)) - min(uint64(cands[pick].DeviceOverlap)*uint64(cfg.BlockSize), uint64(len(rq.Tokens)))
			}
			r := rs[pick]
			if err := r.seqs.AddRequest(sequence.Request{ID: rq.ID, SequenceHashes: sequence.Sample(seqs, stride), PromptBlocks: uint64(len(seqs)),
				ISL: uint64(len(rq.Tokens)), PrefillTokens: uncached, TrackPrefill: true}, base.Add(now)); err != nil {
				t.Fatal(err)
			}
			r.engine.AdvanceTo(now)
			if err := r.engine.Add(mockengine.Request{ID: rq.ID, Prompt: rq.Tokens, MaxTokens: rq.MaxTokens}); err != nil {
				t.Fatal(err)
			}
		case stepRank >= 0:
			r := rs[stepRank]
			outs, err := r.engine.Complete(r.inFlight)
			if err != nil {
				t.Fatal(err)
			}
			r.inFlight = nil
			for _, o := range outs {
				if o.Index == 0 {
					if index[o.RequestID] >= warmup {
						ttfts = append(ttfts, float64(o.At-arrival[o.RequestID])/float64(time.Millisecond))
						prompt += o.PromptTokens
						cached += o.CachedTokens
					}
					if tokens, started, ok := r.seqs.PrefillPending(o.RequestID); ok && tokens > 0 {
						r.rate.Observe(tokens, started, base.Add(o.At))
					}
					_ = r.seqs.MarkPrefillCompleted(o.RequestID)
				}
				if o.Finished {
					_ = r.seqs.Free(o.RequestID)
				}
			}
		default:
			slices.Sort(ttfts)
			return offlineResult{hit: float64(cached) / float64(max(prompt, 1)),
				p50: Percentile(ttfts, 50), p90: Percentile(ttfts, 90), p99: Percentile(ttfts, 99)}
		}
		for _, r := range rs {
			if r.inFlight == nil {
				b, err := r.engine.Schedule()
				if err != nil {
					t.Fatal(err)
				}
				r.inFlight = b
			}
		}
	}
}

// offlineRanks is the decision's view of n ranks, worker ids 1..n.
func offlineRanks(n int) *decider.Ranks {
	v := &decider.Ranks{Budgets: map[kv.WorkerID]uint64{}}
	for i := range n {
		v.List = append(v.List, kv.WorkerWithDpRank{WorkerID: kv.WorkerID(i + 1)})
	}
	v.Has = func(w kv.WorkerWithDpRank) bool { return w.WorkerID >= 1 && int(w.WorkerID) <= n && w.DpRank == 0 }
	return v
}

// offlineDecide routes one request through the Decider as the scheduler
// does (Start, then Decide with the joined candidates) and returns the
// add it records.
func offlineDecide(t testing.TB, dec *decider.Decider, view *decider.Ranks, rq Request, cands []scheduling.Candidate,
	blocks int, now time.Time) decider.RecordAdd {
	t.Helper()
	m := &messages.RouteRequest{RequestId: rq.ID, TokenIds: rq.Tokens, UpdateStates: true}
	effs := dec.Step(now, &decider.Start{Req: m, Ranks: view})
	ask, ok := effs[0].(*decider.Ask)
	if !ok {
		t.Fatalf("%s refused: %+v", rq.ID, effs[0])
	}
	for _, e := range dec.Step(now, &decider.Decide{Req: m, Plan: ask.Plan, Ranks: view, Candidates: cands, Blocks: blocks}) {
		switch e := e.(type) {
		case *decider.RecordAdd:
			return *e
		case *decider.Answer:
			t.Fatalf("%s: %v", rq.ID, e.Err)
		case *decider.Queue:
			t.Fatalf("%s queued (no rank has a budget: cannot happen)", rq.ID)
		}
	}
	t.Fatalf("%s: no add recorded", rq.ID)
	return decider.RecordAdd{}
}

// candidate is what the scheduler actor joins for this rank (its index
// overlap and its sequence tracker's load) and hands the Decider.
func (r *offlineRank) candidate(i int, seqs []kv.SequenceHash, stride int, now time.Time, capacity uint64) scheduling.Candidate {
	overlap := 0
	for _, h := range seqs {
		if _, ok := r.index[h]; !ok {
			break
		}
		overlap++
	}
	l := r.seqs.Load()
	c := scheduling.Candidate{
		Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(i + 1)}, DeviceOverlap: uint32(overlap), HasLoad: true,
		ActivePrefillTokens: l.ActivePrefillTokens, ActiveBlocks: l.ActiveBlocks, ActiveRequests: l.ActiveRequests,
		NewBlocks: r.seqs.NewBlocks(sequence.Sample(seqs, stride), uint64(len(seqs))), PrefillTokensPerSec: r.rate.TokensPerSec(), CapacityBlocks: capacity,
	}
	c.ActivePrefixBlocks = uint32(uint64(len(seqs)) - c.NewBlocks)
	if tokens, started, ok := r.seqs.HeadPrefill(); ok {
		c.HeadPrefillTokens, c.HeadPrefillElapsed = tokens, r.rate.HeadElapsed(started, now)
	}
	return c
}

func modelTime(arrival time.Duration, cfg mockengine.Config) time.Duration {
	return time.Duration(float64(arrival) * cfg.Speedup)
}

func TestOfflineReplay(t *testing.T) {
	workload := os.Getenv("KVBENCH_OFFLINE")
	if workload == "" {
		t.Skip("set KVBENCH_OFFLINE=shared-prefix|multi-turn|mooncake (and QPS, SEED) to replay")
	}
	cfg, err := mockengine.Preset(mockengine.PresetH100Llama3_8B)
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(1)
	if v := os.Getenv("SEED"); v != "" {
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	var schedule func(qps float64) ([]Request, error)
	var warmup int // as the README's kvbench runs
	switch workload {
	case WorkloadSharedPrefix:
		p, err := SharedPrefixPrompts(SharedPrefixConfig{Groups: 64, PromptsPerGroup: 5, SystemTokens: 7000, QuestionTokens: 1000, OutputTokens: 64}, 360, seed)
		if err != nil {
			t.Fatal(err)
		}
		schedule, warmup = func(q float64) ([]Request, error) { return PoissonSchedule(p, q, seed) }, 120
	case WorkloadMultiTurn:
		p, err := MultiTurnPrompts(MultiTurnConfig{Conversations: 30, Turns: 5, SystemTokens: 6000, UserTokens: 200, OutputTokens: 100}, 600, seed)
		if err != nil {
			t.Fatal(err)
		}
		schedule, warmup = func(q float64) ([]Request, error) { return PoissonSchedule(p, q, seed) }, 150
	case WorkloadMooncake:
		recs, err := LoadTrace("", 1500)
		if err != nil {
			t.Fatal(err)
		}
		schedule, warmup = func(q float64) ([]Request, error) { return TraceRequests(recs, q/TraceQPS(recs)) }, 300
	default:
		t.Fatalf("unknown workload %q", workload)
	}
	seqCfg := sequence.DefaultConfig()
	if v := os.Getenv("STRIDE"); v != "" { // router-active-sequence-stride
		if seqCfg.Stride, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	dynamo, ttft := scheduling.DefaultConfig(), scheduling.DefaultConfig()
	ttft.RouterCost = scheduling.CostTTFT
	const ranks = 8
	for _, qs := range strings.Split(os.Getenv("QPS"), ",") {
		q, err := strconv.ParseFloat(qs, 64)
		if err != nil {
			t.Fatalf("QPS %q: %v", qs, err)
		}
		reqs, err := schedule(q)
		if err != nil {
			t.Fatal(err)
		}
		b, err := OracleBoundsAfter(reqs, OracleFleet{Ranks: ranks, BlockSize: cfg.BlockSize, CacheBlocks: cfg.TotalKVBlocks,
			PrefillTokensPerSec: cfg.PrefillTokensPerSec, StepBaseTime: cfg.StepBaseTime, MaxBatchedTokens: cfg.MaxNumBatchedTokens,
			Speedup: cfg.Speedup}, warmup)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("%s at %v QPS (model time), %d requests (%d warm-up): oracle unbounded %.3f capacity %.3f timed %.3f\n",
			workload, q, len(reqs), warmup, b.Unbounded, b.Capacity, b.Timed)
		for _, p := range []struct {
			name string
			sc   scheduling.Config
		}{{PolicyRoundRobin, dynamo}, {PolicyLeastLoaded, dynamo}, {PolicyKVRouterDynamo, dynamo}, {PolicyKVRouter, ttft}} {
			r := offlineReplay(t, cfg, ranks, reqs, warmup, p.name, p.sc, seqCfg)
			fmt.Printf("  %-14s hit %.3f (%.2f of timed)  TTFT p50 %6.0f  p90 %6.0f  p99 %6.0f ms\n",
				p.name, r.hit, r.hit/b.Timed, r.p50, r.p90, r.p99)
		}
	}
}
