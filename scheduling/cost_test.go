package scheduling

import (
	"errors"
	"math"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func rank(id uint64) kv.WorkerWithDpRank { return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id)} }

// Seed 001 weighted_cache_hit_estimates_include_lower_tiers, plus edges.
func TestCacheHitEstimate(t *testing.T) {
	tests := []struct {
		name              string
		cfg               Config
		blockSize         int
		device, host, dsk uint32
		wantBlocks        float64
		wantTokens        uint64
	}{
		{"worker1 device 2 + host 1 + disk 2", DefaultConfig(), 16, 2, 1, 2, 3.25, 52},
		{"worker2 host 1 only", DefaultConfig(), 16, 0, 1, 0, 0.75, 12},
		{"nothing cached", DefaultConfig(), 16, 0, 0, 0, 0, 0},
		{"device only", DefaultConfig(), 64, 3, 0, 0, 3, 192},
		{"rounds to nearest token", DefaultConfig(), 3, 0, 1, 0, 0.75, 2},
		{"lower tiers weighted 0", Config{HostCacheHitWeight: 0, DiskCacheHitWeight: 0}, 16, 1, 5, 5, 1, 16},
		{"no block size", DefaultConfig(), 0, 2, 0, 0, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			blocks, tokens := CacheHitEstimate(tt.cfg, tt.blockSize, tt.device, tt.host, tt.dsk)
			if blocks != tt.wantBlocks || tokens != tt.wantTokens {
				t.Fatalf("got (%v, %d), want (%v, %d)", blocks, tokens, tt.wantBlocks, tt.wantTokens)
			}
		})
	}
}

// BestCacheHit is the largest estimate over the candidates, counting the
// lower tiers at their weights (a host-heavy rank can beat a deeper
// device prefix).
func TestBestCacheHit(t *testing.T) {
	cfg := DefaultConfig() // host 0.75, disk 0.25
	tests := []struct {
		name  string
		cands []Candidate
		want  uint64
	}{
		{"none", nil, 0},
		{"nothing cached", []Candidate{{Worker: rank(1)}, {Worker: rank(2)}}, 0},
		{"deepest device prefix", []Candidate{{Worker: rank(1), DeviceOverlap: 2}, {Worker: rank(2), DeviceOverlap: 5}, {Worker: rank(3), DeviceOverlap: 3}}, 80},
		{"host tier outweighs device", []Candidate{{Worker: rank(1), DeviceOverlap: 3}, {Worker: rank(2), DeviceOverlap: 1, HostOverlap: 4}}, 64},
		{"last candidate best", []Candidate{{Worker: rank(1)}, {Worker: rank(2), DiskOverlap: 6}}, 24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BestCacheHit(&cfg, 16, tt.cands); got != tt.want {
				t.Fatalf("BestCacheHit = %d, want %d", got, tt.want)
			}
		})
	}
}

// workedExample is dynamo.md §1's table: 10 prefill blocks each (isl 160,
// block 16, idle), overlaps 2/5/8 and decode blocks 10/5/9.
func workedExample() []Candidate {
	return []Candidate{
		{Worker: rank(1), DeviceOverlap: 2, ActiveBlocks: 2, NewBlocks: 8, ActiveRequests: 1, HasLoad: true},
		{Worker: rank(2), DeviceOverlap: 5, ActiveBlocks: 0, NewBlocks: 5, HasLoad: true},
		{Worker: rank(3), DeviceOverlap: 8, ActiveBlocks: 7, NewBlocks: 2, ActiveRequests: 3, HasLoad: true},
	}
}

func TestLogit(t *testing.T) {
	w := workedExample()
	with := func(mut func(*Config)) Config {
		c := DefaultConfig()
		mut(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		isl  int
		c    Candidate
		want float64
	}{
		{"worked example W1", DefaultConfig(), 160, w[0], 8 + 10},
		{"worked example W2", DefaultConfig(), 160, w[1], 5 + 5},
		{"worked example W3", DefaultConfig(), 160, w[2], 2 + 9},
		{"active prefill adds to the prompt", DefaultConfig(), 160,
			Candidate{ActivePrefillTokens: 320, DeviceOverlap: 5, NewBlocks: 5, HasLoad: true}, (30 - 5) + 5},
		{"fractional prefill blocks", DefaultConfig(), 40, Candidate{HasLoad: true, NewBlocks: 2}, 2.5 + 2},
		{"overlap beyond the prompt clamps at 0", DefaultConfig(), 32,
			Candidate{DeviceOverlap: 9, ActiveBlocks: 4, HasLoad: true}, 4},
		{"host and disk hits are weighted", DefaultConfig(), 160,
			Candidate{HostOverlap: 4, DiskOverlap: 4, NewBlocks: 10, HasLoad: true}, (10 - 3 - 1) + 10},
		{"credit 0 ignores the cache", with(func(c *Config) { c.OverlapScoreCredit = 0 }), 160, w[1], 10 + 5},
		{"prefill load scale", with(func(c *Config) { c.PrefillLoadScale = 2 }), 160, w[0], 16 + 10},
		{"deprecated weight 0: decode only", with(func(c *Config) { c.OverlapScoreWeight = ptr(0.0) }), 160, w[0], 10},
		{"prefill tracking off", with(func(c *Config) { c.TrackPrefillTokens = false }), 160, w[2], 9},
		{"active request weight", with(func(c *Config) { c.DecodeActiveRequestWeight = 0.5 }), 160, w[2], 11 + 1.5},
		{"unknown load counts as idle", DefaultConfig(), 160,
			Candidate{ActivePrefillTokens: 1600, ActiveBlocks: 99, ActiveRequests: 7, NewBlocks: 10, DeviceOverlap: 0}, 10 + 10},
		{"decay does not apply in isolation", with(func(c *Config) { c.OverlapScoreCreditDecay = 5 }), 160,
			Candidate{ActivePrefillTokens: 320, DeviceOverlap: 9, HasLoad: true}, 30 - 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Logit(tt.cfg, 16, tt.isl, (tt.isl+15)/16, tt.c)
			if math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("Logit = %v, want %v", got, tt.want)
			}
		})
	}
	if got := Logit(DefaultConfig(), 0, 160, 10, w[0]); !math.IsNaN(got) {
		t.Fatalf("Logit with block size 0 = %v, want NaN", got)
	}
}

func TestCostsCreditDecay(t *testing.T) {
	cfg := DefaultConfig()
	cfg.OverlapScoreCreditDecay = 1
	cands := []Candidate{
		{Worker: rank(1), ActivePrefillTokens: 160, HasLoad: true},                   // the load floor: 10 blocks
		{Worker: rank(2), ActivePrefillTokens: 480, DeviceOverlap: 9, HasLoad: true}, // 20 blocks above the floor
	}
	costs, err := Costs(cfg, 16, 160, 10, cands)
	if err != nil {
		t.Fatal(err)
	}
	// Worker 2: decay = 1/(1 + 1·20/10) = 1/3, so 9 cached blocks credit 3.
	want := []float64{(160 + 160) / 16.0, (480+160)/16.0 - 3}
	for i := range want {
		if math.Abs(costs[i]-want[i]) > 1e-12 {
			t.Fatalf("costs = %v, want %v", costs, want)
		}
	}
	cfg.TrackPrefillTokens = false // decay only exists with prefill tracking
	costs, err = Costs(cfg, 16, 160, 10, cands)
	if err != nil || costs[1] != 0 {
		t.Fatalf("untracked costs = %v, %v; want decode-only 0", costs, err)
	}
}

func TestCostsRejectsBadInput(t *testing.T) {
	good := workedExample()
	bad := DefaultConfig()
	bad.OverlapScoreCredit = 2
	tests := []struct {
		name                          string
		cfg                           Config
		blockSize, isl, requestBlocks int
		cands                         []Candidate
		want                          error
	}{
		{"block size 0", DefaultConfig(), 0, 160, 10, good, ErrInvalidInput},
		{"isl 0", DefaultConfig(), 16, 0, 0, good, ErrInvalidInput},
		{"negative request blocks", DefaultConfig(), 16, 160, -1, good, ErrInvalidInput},
		{"invalid config", bad, 16, 160, 10, good, ErrInvalidConfig},
		{"NaN active blocks", DefaultConfig(), 16, 160, 10, []Candidate{{ActiveBlocks: math.NaN(), HasLoad: true}}, ErrInvalidInput},
		{"negative active requests", DefaultConfig(), 16, 160, 10, []Candidate{{ActiveRequests: -1, HasLoad: true}}, ErrInvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Costs(tt.cfg, tt.blockSize, tt.isl, tt.requestBlocks, tt.cands); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}
