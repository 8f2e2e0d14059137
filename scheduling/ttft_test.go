package scheduling

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func ttftConfig() Config {
	c := DefaultConfig()
	c.RouterCost = CostTTFT
	return c
}

func TestParseCostModel(t *testing.T) {
	for _, s := range []string{"dynamo", "ttft"} {
		if m, err := ParseCostModel(s); err != nil || string(m) != s {
			t.Errorf("%q: %v %v", s, m, err)
		}
	}
	for _, s := range []string{"", "Dynamo", "latency"} {
		if _, err := ParseCostModel(s); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%q accepted: %v", s, err)
		}
	}
}

// Each row is one candidate for a 1,600-token prompt (100 blocks of 16)
// at 1,000 tokens/s with λ = 2 and φ = 0.9: the cost is in seconds.
func TestTTFTCost(t *testing.T) {
	const isl, bs, rate = 1600, 16, 1000.0
	tests := []struct {
		name string
		mut  func(*Config)
		c    Candidate
		want float64
	}{
		{"idle, nothing cached: 1.6 s + 2 x 1.6 s", nil,
			Candidate{NewBlocks: 100}, 4.8},
		{"idle, 60 blocks cached: 640 uncached tokens", nil,
			Candidate{DeviceOverlap: 60, NewBlocks: 100}, 3 * 0.64},
		{"fully cached", nil,
			Candidate{DeviceOverlap: 100, NewBlocks: 100}, 0},
		{"queued prefill waits in front", nil,
			Candidate{DeviceOverlap: 100, ActivePrefillTokens: 2000, HasLoad: true}, 2},
		{"the head request's progress is not waited for", nil,
			Candidate{DeviceOverlap: 100, ActivePrefillTokens: 2000, HeadPrefillTokens: 800, HeadPrefillElapsed: 500 * time.Millisecond, HasLoad: true}, 1.5},
		{"progress never exceeds the head request", nil,
			Candidate{DeviceOverlap: 100, ActivePrefillTokens: 2000, HeadPrefillTokens: 800, HeadPrefillElapsed: time.Hour, HasLoad: true}, 1.2},
		{"blocks in flight count as cached", nil,
			Candidate{ActivePrefixBlocks: 60, ActivePrefillTokens: 1000, NewBlocks: 40, HasLoad: true}, 1 + 3*0.64},
		{"whichever is longer, cached or in flight", nil,
			Candidate{DeviceOverlap: 80, ActivePrefixBlocks: 60, NewBlocks: 40, HasLoad: true}, 3 * 0.32},
		{"in flight ignored without a load reply", nil,
			Candidate{ActivePrefixBlocks: 60, NewBlocks: 100}, 4.8},
		{"host and disk tiers credited at their weights", nil,
			Candidate{DeviceOverlap: 20, HostOverlap: 40, DiskOverlap: 40, NewBlocks: 100}, 3 * (1600 - (20+30+10)*16) / 1000.0},
		{"credit 0 ignores the cache", func(c *Config) { c.OverlapScoreCredit = 0 },
			Candidate{DeviceOverlap: 100, ActivePrefixBlocks: 100, HasLoad: true}, 4.8},
		{"λ = 0 is the plain predicted TTFT", func(c *Config) { c.TTFT.UncachedWeight = 0 },
			Candidate{ActivePrefillTokens: 400, NewBlocks: 100, HasLoad: true}, 2},
		{"under the KV headroom nothing is charged", nil,
			Candidate{DeviceOverlap: 100, ActiveBlocks: 800, NewBlocks: 100, CapacityBlocks: 1000, HasLoad: true}, 0},
		{"past it the excess blocks are charged as tokens", nil,
			Candidate{DeviceOverlap: 100, ActiveBlocks: 850, NewBlocks: 100, CapacityBlocks: 1000, HasLoad: true}, 50 * 16 / 1000.0},
		{"unknown capacity charges nothing", nil,
			Candidate{DeviceOverlap: 100, ActiveBlocks: 1e6, NewBlocks: 100, HasLoad: true}, 0},
		{"a prompt larger than an idle rank's headroom", nil,
			Candidate{DeviceOverlap: 100, NewBlocks: 100, CapacityBlocks: 100}, 10 * 16 / 1000.0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ttftConfig()
			if tt.mut != nil {
				tt.mut(&cfg)
			}
			if got := TTFTCost(cfg, bs, isl, tt.c, rate); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("cost %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEffectiveRates(t *testing.T) {
	tests := []struct {
		name  string
		rates []float64
		want  []float64
	}{
		{"nothing measured: the prior", []float64{0, 0}, []float64{100, 100}},
		{"noise within ±25% of the median reads as the median", []float64{90, 110, 100}, []float64{100, 100, 100}},
		{"an unmeasured rank runs at its measured peers' median, not the prior", []float64{300, 320, 0}, []float64{320, 320, 320}},
		{"a really slower rank keeps its rate", []float64{100, 105, 40}, []float64{100, 100, 40}},
		{"one candidate keeps its own", []float64{57}, []float64{57}},
		{"an infinite rate is not a measurement", []float64{math.Inf(1), 300}, []float64{300, 300}},
	}
	idle := []Candidate{
		{PrefillTokensPerSec: 300, HasLoad: true, ActiveRequests: 2},
		{PrefillTokensPerSec: 310, HasLoad: true, ActiveRequests: 1},
		{PrefillTokensPerSec: 50, HasLoad: true},     // measured slow once, idle now
		{PrefillTokensPerSec: 50},                    // not asked (idle)
		{PrefillTokensPerSec: 40, ActiveRequests: 3}, // no load reply: treated as idle
	}
	if got := effectiveRates(100, idle); got[2] != 310 || got[3] != 310 || got[4] != 310 || got[0] != 310 {
		t.Fatalf("idle ranks: %v, want all at the busy ones' median 310", got)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := make([]Candidate, len(tt.rates))
			for i, r := range tt.rates {
				cands[i] = Candidate{PrefillTokensPerSec: r, HasLoad: true, ActiveRequests: 1}
			}
			got := effectiveRates(100, cands)
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("rates %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestPrefillRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var p PrefillRate
	if p.TokensPerSec() != 0 {
		t.Fatal("an empty estimator reports a rate")
	}
	// A FCFS server at 2,000 tokens/s: requests of 1,000 tokens arrive
	// together; each completes 0.5 s after the previous one.
	for i := range PrefillRateMinSamples - 1 {
		p.Observe(1000, at(0), at(500*(i+1)))
	}
	if p.TokensPerSec() != 0 {
		t.Fatalf("rate %v before %d samples", p.TokensPerSec(), PrefillRateMinSamples)
	}
	p.Observe(1000, at(0), at(500*PrefillRateMinSamples))
	if got := p.TokensPerSec(); math.Abs(got-2000) > 1e-6 {
		t.Fatalf("rate %v, want 2000 (service times chained from the previous completion)", got)
	}
	last := at(500 * PrefillRateMinSamples)
	if p.LastDone() != last {
		t.Fatalf("last done %v", p.LastDone())
	}
	// An idle rank serves from the request's arrival: 3,000 tokens in
	// 0.5 s after it arrived late.
	p.Observe(3000, last.Add(time.Hour), last.Add(time.Hour+500*time.Millisecond))
	if got := p.TokensPerSec(); got <= 2000 {
		t.Fatalf("rate %v did not move towards 6000", got)
	}
	// Zero tokens, time going back and implausibly long waits add no sample.
	before, samples := p.TokensPerSec(), p.samples
	p.Observe(0, last, last.Add(2*time.Hour))
	p.Observe(500, last, last)
	p.Observe(500, last.Add(3*time.Hour), last.Add(4*time.Hour))
	if p.TokensPerSec() != before || p.samples != samples {
		t.Fatalf("rate %v -> %v, samples %d -> %d", before, p.TokensPerSec(), samples, p.samples)
	}
	if p.LastDone() != last.Add(4*time.Hour) {
		t.Fatalf("the clock did not move: %v", p.LastDone())
	}
	// The head of the queue is served since the later of its arrival and
	// the last completion.
	if got := p.HeadElapsed(last, last.Add(4*time.Hour+time.Second)); got != time.Second {
		t.Fatalf("head elapsed %v", got)
	}
	if got := p.HeadElapsed(last.Add(5*time.Hour), last.Add(5*time.Hour+2*time.Second)); got != 2*time.Second {
		t.Fatalf("head elapsed %v", got)
	}
	if got := p.HeadElapsed(last.Add(6*time.Hour), last); got != 0 {
		t.Fatalf("negative head elapsed %v", got)
	}
}

// With the ttft cost the selection goes to the cheapest predicted TTFT;
// Dynamo's cost ignores the new fields bit for bit.
func TestSelectByCostModel(t *testing.T) {
	// Rank 1 holds the prefix but 3,000 tokens are queued in front; rank
	// 2 is idle and cold. Prompt 1,600 tokens, 80 blocks cached on 1.
	cands := []Candidate{
		{Worker: rank(1), DeviceOverlap: 80, ActivePrefillTokens: 3000, ActiveBlocks: 200, NewBlocks: 20, ActiveRequests: 2, HasLoad: true},
		{Worker: rank(2), NewBlocks: 100},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	cfg := ttftConfig()
	cfg.TTFT.PrefillTokensPerSec = 1000
	// rank 1: (3000 + 3·320)/1000 = 3.96 s; rank 2: 3·1600/1000 = 4.8 s.
	d, err := Select(cfg, 16, 1600, 100, cands, rng)
	if err != nil || d.Worker != rank(1) || math.Abs(d.Cost-3.96) > 1e-9 {
		t.Fatalf("ttft: %+v %v", d, err)
	}
	// λ = 0: rank 1 costs 3.32 s, rank 2 1.6 s.
	cfg.TTFT.UncachedWeight = 0
	if d, _ := Select(cfg, 16, 1600, 100, cands, rng); d.Worker != rank(2) {
		t.Fatalf("λ = 0: %+v", d)
	}
	// Dynamo: rank 1 (3000+1600)/16 − 80 + 220 = 427.5; rank 2 100 + 100 = 200.
	dyn := DefaultConfig()
	base, err := Costs(dyn, 16, 1600, 100, cands)
	if err != nil || base[0] != 427.5 || base[1] != 200 {
		t.Fatalf("dynamo costs %v %v", base, err)
	}
	with := append([]Candidate(nil), cands...)
	for i := range with {
		with[i].ActivePrefixBlocks, with[i].PrefillTokensPerSec, with[i].CapacityBlocks = 50, 5, 10
		with[i].HeadPrefillTokens, with[i].HeadPrefillElapsed = 1000, time.Second
	}
	after, _ := Costs(dyn, 16, 1600, 100, with)
	if after[0] != base[0] || after[1] != base[1] {
		t.Fatalf("Dynamo's cost moved with the ttft fields: %v -> %v", base, after)
	}
	// Softmax sampling works on seconds as on blocks.
	cfg.RouterTemperature = 0.5
	if _, err := Select(cfg, 16, 1600, 100, cands, rng); err != nil {
		t.Fatal(err)
	}
}

// AddRouted shows a rank what decisions recorded after its loads were
// read added to it, as its tracker will once it has them.
func TestAddRouted(t *testing.T) {
	req := []uint64{1, 2, 3, 4} // 4 sampled hashes, stride 2: 8 blocks (+1 trailing)
	cands := []Candidate{
		{Worker: rank(1), HasLoad: true, ActivePrefillTokens: 100, ActiveBlocks: 10, NewBlocks: 9, ActiveRequests: 1},
		{Worker: rank(2), HasLoad: true, NewBlocks: 9},
		{Worker: rank(3), NewBlocks: 5}, // no load reply yet
	}
	AddRouted(cands, req, 9, 2, []Routed{
		{Worker: rank(1), PrefillTokens: 500, NewBlocks: 6, Hashes: []uint64{1, 2, 9}}, // shares 2 hashes = 4 blocks
		{Worker: rank(1), PrefillTokens: 50, NewBlocks: 1, Hashes: []uint64{1, 2, 3, 4, 5}},
		{Worker: rank(3), PrefillTokens: 7, NewBlocks: 3, Hashes: []uint64{8}},
		{Worker: rank(4), PrefillTokens: 1000, NewBlocks: 9, Hashes: req}, // not a candidate
	})
	c1, c2, c3 := cands[0], cands[1], cands[2]
	if c1.ActivePrefillTokens != 650 || c1.ActiveRequests != 3 || c1.ActiveBlocks != 17 || c1.ActivePrefixBlocks != 8 || c1.NewBlocks != 1 {
		t.Errorf("rank 1: %+v", c1)
	}
	if c2.ActivePrefillTokens != 0 || c2.ActiveRequests != 0 || c2.NewBlocks != 9 {
		t.Errorf("rank 2 got what it was not routed: %+v", c2)
	}
	if !c3.HasLoad || c3.ActivePrefillTokens != 7 || c3.ActiveRequests != 1 || c3.ActivePrefixBlocks != 0 || c3.NewBlocks != 9 || c3.ActiveBlocks != 3 {
		t.Errorf("rank 3 (idle until now): %+v", c3)
	}
}

// The published-nanoseconds form agrees with SinceHeadStart and clamps a
// start in the future (another replica's clock ahead of ours) to 0.
func TestSinceHeadStartUnixNano(t *testing.T) {
	now := time.Unix(1_800_000_000, 500)
	for _, start := range []time.Time{now.Add(-3 * time.Second), now, now.Add(2 * time.Millisecond)} {
		want := SinceHeadStart(start, now)
		if got := SinceHeadStartUnixNano(start.UnixNano(), now.UnixNano()); got != want {
			t.Fatalf("start %v: got %v, want %v", start, got, want)
		}
	}
	if got := SinceHeadStartUnixNano(now.Add(time.Second).UnixNano(), now.UnixNano()); got != 0 {
		t.Fatalf("future start: got %v, want 0", got)
	}
}
