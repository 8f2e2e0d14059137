package mockengine

import (
	"slices"
	"testing"
	"time"
)

// simRequest is one request of an offline fleet simulation.
type simRequest struct {
	id      string
	prompt  []uint32
	arrival time.Duration
}

// simResult is what a routing policy achieved on a simulated fleet.
type simResult struct {
	meanTTFT time.Duration
	p90TTFT  time.Duration
	makespan time.Duration // last token of the last request
	hitRate  float64       // cached / prompt tokens
}

// pickFunc chooses a rank for a request.
type pickFunc func(ranks []*Rank, prompt []uint32, n int) int

func roundRobin(ranks []*Rank, _ []uint32, n int) int { return n % len(ranks) }

// kvAware is Dynamo's default cost with overlap weight 1: blocks to
// prefill on that rank, plus the decode blocks the rank would hold (those
// active there and the request's blocks not already cached there).
func kvAware(ranks []*Rank, prompt []uint32, _ int) int {
	best, bestCost := 0, 0
	for i, r := range ranks {
		bs := r.cfg.BlockSize
		prefill := ceilDiv(len(prompt)-r.CachedPrefixTokens(prompt), bs)
		cost := 2*prefill + r.Stats().UsedBlocks + r.waitingBlocks()
		if i == 0 || cost < bestCost {
			best, bestCost = i, cost
		}
	}
	return best
}

// waitingBlocks is the prompt blocks queued on the rank (a router sees
// them as active prefill load).
func (r *Rank) waitingBlocks() int {
	n := 0
	for _, s := range r.waiting {
		n += ceilDiv(len(s.tokens), r.cfg.BlockSize)
	}
	return n
}

// simulate runs a fleet of ranks in model time: discrete events are
// arrivals and step completions, taken in time order.
func simulate(t testing.TB, cfg Config, ranks int, reqs []simRequest, maxTokens int, pick pickFunc) simResult {
	fleet := make([]*Rank, ranks)
	inFlight := make([]*Batch, ranks)
	for i := range fleet {
		r, err := NewRank(cfg, uint32(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		fleet[i] = r
	}
	arrival := map[string]time.Duration{}
	var ttfts []time.Duration
	var res simResult
	var prompt, cached int
	next := 0
	for {
		// The earliest step to finish, if any.
		stepRank, stepEnd := -1, time.Duration(0)
		for i, b := range inFlight {
			if b != nil && (stepRank < 0 || fleet[i].Now()+b.Duration < stepEnd) {
				stepRank, stepEnd = i, fleet[i].Now()+b.Duration
			}
		}
		switch {
		case next < len(reqs) && (stepRank < 0 || reqs[next].arrival <= stepEnd):
			rq := reqs[next]
			i := pick(fleet, rq.prompt, next)
			next++
			fleet[i].AdvanceTo(rq.arrival)
			if err := fleet[i].Add(Request{ID: rq.id, Prompt: rq.prompt, MaxTokens: maxTokens}); err != nil {
				t.Fatal(err)
			}
			arrival[rq.id] = rq.arrival
		case stepRank >= 0:
			outs, err := fleet[stepRank].Complete(inFlight[stepRank])
			if err != nil {
				t.Fatal(err)
			}
			inFlight[stepRank] = nil
			for _, o := range outs {
				if o.Index == 0 {
					ttfts = append(ttfts, o.At-arrival[o.RequestID])
					prompt += o.PromptTokens
					cached += o.CachedTokens
				}
				res.makespan = max(res.makespan, o.At)
			}
		default:
			slices.Sort(ttfts)
			var sum time.Duration
			for _, d := range ttfts {
				sum += d
			}
			res.meanTTFT = sum / time.Duration(len(ttfts))
			res.p90TTFT = ttfts[len(ttfts)*9/10]
			res.hitRate = float64(cached) / float64(prompt)
			return res
		}
		for i, r := range fleet {
			if inFlight[i] == nil {
				b, err := r.Schedule()
				if err != nil {
					t.Fatal(err)
				}
				inFlight[i] = b
			}
		}
	}
}

// sharedPrefixWorkload: every request is one of docs long shared prefixes
// plus a unique suffix, arriving every gap.
func sharedPrefixWorkload(n, docs, prefixLen, suffixLen int, gap time.Duration) []simRequest {
	out := make([]simRequest, n)
	for i := range out {
		doc := int(GeneratedToken(1, i)) % docs // pseudo-random, deterministic
		p := append(seqTokens(doc*100000, prefixLen), seqTokens(10_000_000+i*suffixLen, suffixLen)...)
		out[i] = simRequest{id: "r" + string(rune(i)), prompt: p, arrival: time.Duration(i) * gap}
	}
	return out
}

// simConfig: each rank can cache a quarter of the prefixes, so a router
// that keeps each prefix on one rank hits, and round robin thrashes.
func simConfig() Config {
	cfg := DefaultConfig()
	cfg.TotalKVBlocks = 512 // 8k tokens per rank; 16 prefixes of 1k tokens
	return cfg
}

func TestKVAwareRoutingBeatsRoundRobinOnTheModel(t *testing.T) {
	tests := []struct {
		name string
		gap  time.Duration
	}{
		{"50 req/s", 20 * time.Millisecond},
		{"100 req/s (overload)", 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs := sharedPrefixWorkload(400, 16, 1024, 64, tt.gap)
			rr := simulate(t, simConfig(), 4, reqs, 32, roundRobin)
			kva := simulate(t, simConfig(), 4, reqs, 32, kvAware)
			t.Logf("round robin: mean TTFT %v p90 %v makespan %v hit %.2f", rr.meanTTFT, rr.p90TTFT, rr.makespan, rr.hitRate)
			t.Logf("kv aware:    mean TTFT %v p90 %v makespan %v hit %.2f", kva.meanTTFT, kva.p90TTFT, kva.makespan, kva.hitRate)
			if kva.hitRate < rr.hitRate+0.25 {
				t.Errorf("kv-aware hit rate %.2f should beat round robin's %.2f by 0.25", kva.hitRate, rr.hitRate)
			}
			if kva.meanTTFT*3 > rr.meanTTFT*2 {
				t.Errorf("kv-aware mean TTFT %v should be under 2/3 of round robin's %v", kva.meanTTFT, rr.meanTTFT)
			}
			if kva.makespan > rr.makespan {
				t.Errorf("kv-aware should finish the workload no later: %v vs %v", kva.makespan, rr.makespan)
			}
		})
	}
}
