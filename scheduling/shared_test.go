package scheduling

import (
	"math"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// The seed's formula (lib/llm/src/kv_router.rs get_overlap_scores):
// shared_credit_blocks = hits_beyond(device_blocks) × shared_cache_multiplier,
// with hits_beyond(d) = shared hits at block positions ≥ d.
func TestSharedCredit(t *testing.T) {
	tests := []struct {
		name           string
		mult           float64
		device, shared uint32
		beyond         uint32
		credit         float64
	}{
		{"off", 0, 2, 8, 6, 0},
		{"beyond device", 0.5, 2, 8, 6, 3},
		{"no device prefix", 0.5, 0, 8, 8, 4},
		{"device covers shared", 0.5, 8, 8, 0, 0},
		{"device beyond shared", 0.5, 10, 8, 0, 0},
		{"no shared", 0.5, 3, 0, 0, 0},
		{"multiplier one", 1, 1, 4, 3, 3},
		{"multiplier above one", 2, 1, 4, 3, 6},
		{"NaN multiplier credits nothing", math.NaN(), 0, 4, 4, 0},
		{"negative multiplier credits nothing", -1, 0, 4, 4, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SharedBeyondDevice(tt.device, tt.shared); got != tt.beyond {
				t.Fatalf("beyond = %d, want %d", got, tt.beyond)
			}
			if got := SharedCredit(tt.mult, tt.device, tt.shared); got != tt.credit {
				t.Fatalf("credit = %v, want %v", got, tt.credit)
			}
		})
	}
}

// sharedFlipCands: 10-block prompt (block size 16, isl 160), shared
// prefix 8 blocks. A has device overlap 2 and nothing active; B has device
// overlap 6 and 3 active blocks. By hand (Dynamo's logit, credit 1,
// scale 1, every prompt block new on both):
//
//	mult 0:    A = (10−2) + 10 = 18            B = (10−6) + 13 = 17    → B
//	mult 0.25: A = (10−2−0.25·6) + 10 = 16.5   B = (10−6−0.25·2) + 13 = 16.5
//	mult 0.5:  A = (10−2−0.5·6) + 10 = 15      B = (10−6−0.5·2) + 13 = 16    → A
func sharedFlipCands() []Candidate {
	a := kv.WorkerWithDpRank{WorkerID: 1}
	b := kv.WorkerWithDpRank{WorkerID: 2}
	return []Candidate{
		{Worker: a, DeviceOverlap: 2, SharedOverlap: 8, HasLoad: true, NewBlocks: 10},
		{Worker: b, DeviceOverlap: 6, SharedOverlap: 8, HasLoad: true, ActiveBlocks: 3, NewBlocks: 10},
	}
}

func TestSharedCreditFlipsDecision(t *testing.T) {
	tests := []struct {
		mult  float64
		costs [2]float64
		pick  kv.WorkerID // 0: a tie
	}{
		{0, [2]float64{18, 17}, 2},
		{0.25, [2]float64{16.5, 16.5}, 0},
		{0.5, [2]float64{15, 16}, 1},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		cfg.SharedCacheMultiplier = tt.mult
		costs, err := Costs(cfg, 16, 160, 10, sharedFlipCands())
		if err != nil {
			t.Fatal(err)
		}
		if costs[0] != tt.costs[0] || costs[1] != tt.costs[1] {
			t.Fatalf("mult %v: costs %v, want %v", tt.mult, costs, tt.costs)
		}
		if tt.pick == 0 {
			continue
		}
		d, err := Select(cfg, 16, 160, 10, sharedFlipCands(), seeded(1))
		if err != nil {
			t.Fatal(err)
		}
		if d.Worker.WorkerID != tt.pick {
			t.Fatalf("mult %v: picked %s, want worker %d", tt.mult, d.Worker, tt.pick)
		}
		// The shared credit steers the choice but is not a cache hit of
		// the worker: the engine still loads those blocks (Dynamo's cache
		// hit estimates use the tiered device/host/disk matches only).
		wantOverlap := map[kv.WorkerID]uint32{1: 2, 2: 6}[tt.pick]
		if d.OverlapBlocks != wantOverlap || d.CachedTokens != uint64(wantOverlap)*16 {
			t.Fatalf("mult %v: overlap %d cached %d, want %d and %d", tt.mult, d.OverlapBlocks, d.CachedTokens, wantOverlap, wantOverlap*16)
		}
	}
}

// The per-request override replaces the configured multiplier, as
// Dynamo's RouterConfigOverride.shared_cache_multiplier does.
func TestSharedCacheMultiplierOverride(t *testing.T) {
	half, zero, neg := 0.5, 0.0, -0.5
	base := DefaultConfig()
	if base.SharedCacheMultiplier != 0 {
		t.Fatalf("default multiplier %v, want Dynamo's 0", base.SharedCacheMultiplier)
	}
	cfg := base.WithOverride(&Override{SharedCacheMultiplier: &half})
	d, err := Select(cfg, 16, 160, 10, sharedFlipCands(), seeded(1))
	if err != nil || d.Worker.WorkerID != 1 {
		t.Fatalf("override 0.5 picked %v (%v), want worker 1", d.Worker, err)
	}
	base.SharedCacheMultiplier = 0.5
	cfg = base.WithOverride(&Override{SharedCacheMultiplier: &zero})
	d, err = Select(cfg, 16, 160, 10, sharedFlipCands(), seeded(1))
	if err != nil || d.Worker.WorkerID != 2 {
		t.Fatalf("override 0 picked %v (%v), want worker 2", d.Worker, err)
	}
	if err := (&Override{SharedCacheMultiplier: &neg}).Validate(); err == nil {
		t.Fatal("negative shared_cache_multiplier override accepted")
	}
	bad := DefaultConfig()
	bad.SharedCacheMultiplier = math.Inf(1)
	if err := bad.Validate(); err == nil {
		t.Fatal("infinite shared_cache_multiplier accepted")
	}
}

// The ttft cost takes the same credit: uncached = isl − (device +
// shared credit) × block size. Idle, unmeasured candidate at the prior
// rate r: cost = (1 + uncached_weight) × uncached / r.
func TestTTFTCostSharedCredit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RouterCost = CostTTFT
	c := Candidate{Worker: kv.WorkerWithDpRank{WorkerID: 1}, DeviceOverlap: 2, SharedOverlap: 8, NewBlocks: 10}
	rate := cfg.TTFT.PrefillTokensPerSec
	for _, tt := range []struct {
		mult     float64
		uncached float64
	}{
		{0, 160 - 2*16},          // 128 tokens
		{0.5, 160 - (2+3)*16},    // 80 tokens
		{1, 160 - (2+6)*16},      // 32 tokens
		{1.5, max(160-11*16, 0)}, // credit beyond the prompt: nothing left
	} {
		cfg.SharedCacheMultiplier = tt.mult
		want := (1 + cfg.TTFT.UncachedWeight) * tt.uncached / rate
		if got := TTFTCost(cfg, 16, 160, c, rate); math.Abs(got-want) > 1e-12 {
			t.Fatalf("mult %v: cost %v, want %v", tt.mult, got, want)
		}
	}
}
