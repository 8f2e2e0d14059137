package scheduling

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func TestSelectTemperatureZero(t *testing.T) {
	tests := []struct {
		name     string
		isl      int
		cands    []Candidate
		want     uint64
		wantCost float64
	}{
		{"worked example picks W2", 160, workedExample(), 2, 10},
		{"overlap wins when loads tie", 160, []Candidate{
			{Worker: rank(1), DeviceOverlap: 1, NewBlocks: 9, ActiveBlocks: 5, HasLoad: true},
			{Worker: rank(2), DeviceOverlap: 6, NewBlocks: 4, ActiveBlocks: 5, HasLoad: true},
			{Worker: rank(3), DeviceOverlap: 3, NewBlocks: 7, ActiveBlocks: 5, HasLoad: true},
		}, 2, (10 - 6) + 9},
		{"load wins when nothing is cached", 160, []Candidate{
			{Worker: rank(1), ActivePrefillTokens: 320, NewBlocks: 10, HasLoad: true},
			{Worker: rank(2), ActivePrefillTokens: 16, NewBlocks: 10, HasLoad: true},
			{Worker: rank(3), ActivePrefillTokens: 0, NewBlocks: 10, ActiveBlocks: 30, HasLoad: true},
		}, 2, 11 + 10},
		{"single candidate", 16, []Candidate{{Worker: rank(9), NewBlocks: 1, HasLoad: true}}, 9, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Select(DefaultConfig(), 16, tt.isl, (tt.isl+15)/16, tt.cands, seeded(1))
			if err != nil {
				t.Fatal(err)
			}
			if d.Worker != rank(tt.want) || d.Cost != tt.wantCost || d.Candidates != len(tt.cands) {
				t.Fatalf("decision %+v, want worker %d cost %v", d, tt.want, tt.wantCost)
			}
		})
	}
}

func TestSelectDecisionFields(t *testing.T) {
	cands := []Candidate{
		{Worker: rank(1), DeviceOverlap: 2, HostOverlap: 1, DiskOverlap: 2, NewBlocks: 5, HasLoad: true},
		{Worker: rank(2), HostOverlap: 1, NewBlocks: 10, ActiveBlocks: 50, HasLoad: true},
	}
	d, err := Select(DefaultConfig(), 16, 160, 10, cands, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	want := Decision{Worker: rank(1), OverlapBlocks: 2, EffectiveOverlapBlocks: 3.25, CachedTokens: 52, Cost: (10 - 3.25) + 5, Candidates: 2}
	if d != want {
		t.Fatalf("decision %+v, want %+v", d, want)
	}
}

func TestSelectRandomTieBreakCoversAllTied(t *testing.T) {
	cands := []Candidate{
		{Worker: rank(1), NewBlocks: 4, HasLoad: true},
		{Worker: rank(2), NewBlocks: 5, HasLoad: true}, // strictly worse
		{Worker: rank(3), NewBlocks: 4, HasLoad: true},
		{Worker: rank(4), NewBlocks: 4, HasLoad: true},
	}
	rng := seeded(7)
	counts := map[uint64]int{}
	const draws = 3000
	for range draws {
		d, err := Select(DefaultConfig(), 16, 64, 4, cands, rng)
		if err != nil {
			t.Fatal(err)
		}
		counts[uint64(d.Worker.WorkerID)]++
	}
	if counts[2] != 0 {
		t.Fatalf("the costlier worker was picked %d times", counts[2])
	}
	for _, w := range []uint64{1, 3, 4} {
		// Uniform would be 1000 each; 850 is > 5 standard deviations away.
		if counts[w] < 850 || counts[w] > 1150 {
			t.Fatalf("tie-break not uniform: %v", counts)
		}
	}
}

func TestSoftmaxProbabilities(t *testing.T) {
	e := math.Exp(-1)
	tests := []struct {
		name  string
		costs []float64
		temp  float64
		want  []float64
	}{
		{"two costs at T=1", []float64{10, 20}, 1, []float64{1 / (1 + e), e / (1 + e)}},
		{"normalised: the scale of costs does not matter", []float64{1000, 2000}, 1, []float64{1 / (1 + e), e / (1 + e)}},
		{"equal costs are uniform", []float64{3, 3, 3, 3}, 0.5, []float64{0.25, 0.25, 0.25, 0.25}},
		{"hotter is flatter", []float64{0, 1}, 1e9, []float64{0.5, 0.5}},
		{"middle cost", []float64{0, 5, 10}, 1, []float64{1 / (1 + math.Exp(-0.5) + e), math.Exp(-0.5) / (1 + math.Exp(-0.5) + e), e / (1 + math.Exp(-0.5) + e)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SoftmaxProbabilities(tt.costs, tt.temp)
			for i := range tt.want {
				if math.Abs(got[i]-tt.want[i]) > 1e-9 {
					t.Fatalf("p = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestSelectSoftmaxDistribution(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RouterTemperature = 0.5
	cands := []Candidate{
		{Worker: rank(1), NewBlocks: 0, HasLoad: true}, // cost 4
		{Worker: rank(2), NewBlocks: 2, HasLoad: true}, // cost 6
		{Worker: rank(3), NewBlocks: 4, HasLoad: true}, // cost 8
	}
	costs, err := Costs(cfg, 16, 64, 4, cands)
	if err != nil {
		t.Fatal(err)
	}
	want := SoftmaxProbabilities(costs, cfg.RouterTemperature)
	rng := seeded(42)
	counts := make([]int, len(cands))
	const draws = 20000
	for range draws {
		d, err := Select(cfg, 16, 64, 4, cands, rng)
		if err != nil {
			t.Fatal(err)
		}
		counts[d.Worker.WorkerID-1]++
	}
	for i := range counts {
		got := float64(counts[i]) / draws
		if math.Abs(got-want[i]) > 0.015 {
			t.Fatalf("empirical %v vs expected %v (counts %v)", got, want[i], counts)
		}
	}
	if !(want[0] > want[1] && want[1] > want[2]) {
		t.Fatalf("cheaper workers must be likelier: %v", want)
	}
}

func TestSelectTemperatureFromOverride(t *testing.T) {
	cfg := DefaultConfig().WithOverride(&Override{RouterTemperature: ptr(1.0)})
	cands := workedExample()
	rng := seeded(3)
	seen := map[uint64]bool{}
	for range 500 {
		d, err := Select(cfg, 16, 160, 10, cands, rng)
		if err != nil {
			t.Fatal(err)
		}
		seen[uint64(d.Worker.WorkerID)] = true
	}
	if len(seen) != 3 {
		t.Fatalf("at T=1 every worker should be sampled sometimes, saw %v", seen)
	}
}

func TestSelectErrors(t *testing.T) {
	if _, err := Select(DefaultConfig(), 16, 160, 10, nil, seeded(1)); !errors.Is(err, ErrNoEligibleWorker) {
		t.Fatalf("no candidates err = %v", err)
	}
	if _, err := Select(DefaultConfig(), 16, 160, 10, workedExample(), nil); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("nil rng err = %v", err)
	}
	if _, err := Select(DefaultConfig(), -16, 160, 10, workedExample(), seeded(1)); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("negative block size err = %v", err)
	}
}
