package bench

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestRotatedOrder(t *testing.T) {
	ps := []string{"a", "b", "c"}
	for r, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}} {
		if got := RotatedOrder(ps, r); !slices.Equal(got, want) {
			t.Errorf("run %d: %v, want %v", r, got, want)
		}
	}
	if !slices.Equal(ps, []string{"a", "b", "c"}) {
		t.Fatalf("the input was modified: %v", ps)
	}
}

func TestMedianPoint(t *testing.T) {
	b := Bounds{Timed: 0.8, TTFTFloorP90: 120}
	runs := []Point{
		{Name: PolicyKVRouter, QPS: 8, HitRate: 0.6, TTFTP90: 900, ThroughputTokS: 100, Errors: 1, Bounds: b,
			Detector: &DetectorCounts{Suspicions: 2}, DisaggPaths: map[string]uint64{"remote": 3}},
		{Name: PolicyKVRouter, QPS: 8, HitRate: 0.7, TTFTP90: 300, ThroughputTokS: 300, Bounds: b},
		{Name: PolicyKVRouter, QPS: 8, HitRate: 0.5, TTFTP90: 400, ThroughputTokS: 200, Errors: 2, Bounds: b,
			Detector: &DetectorCounts{Suspicions: 1}, DisaggPaths: map[string]uint64{"remote": 1, "same_rank": 4}},
	}
	got, err := MedianPoint(runs)
	if err != nil {
		t.Fatal(err)
	}
	// Each figure's own median: 0.6 from run 1, 400 from run 3.
	if got.HitRate != 0.6 || got.TTFTP90 != 400 || got.ThroughputTokS != 200 || got.Runs != 3 || got.Errors != 3 {
		t.Fatalf("medians %+v", got)
	}
	if r := got.Range; r == nil || r.HitRate != (Span{0.5, 0.7}) || r.TTFTP90 != (Span{300, 900}) || r.ThroughputTokS != (Span{100, 300}) {
		t.Fatalf("ranges %+v", got.Range)
	}
	if got.Detector == nil || got.Detector.Suspicions != 3 || got.DisaggPaths["remote"] != 4 || got.DisaggPaths["same_rank"] != 4 {
		t.Fatalf("sums: detector %+v, paths %v", got.Detector, got.DisaggPaths)
	}
	if got.Bounds != b {
		t.Fatalf("bounds %+v", got.Bounds)
	}
	if runs[0].DisaggPaths["remote"] != 3 || runs[0].Detector.Suspicions != 2 {
		t.Fatalf("the first run was modified: %+v", runs[0])
	}
	even, err := MedianPoint(runs[:2])
	if err != nil || math.Abs(even.HitRate-0.65) > 1e-12 || even.TTFTP90 != 600 {
		t.Fatalf("two runs: %+v, %v", even, err)
	}
	one, err := MedianPoint(runs[1:2])
	if err != nil || one.Range != nil || one.Runs != 1 || one.HitRate != 0.7 {
		t.Fatalf("one run: %+v, %v", one, err)
	}
	if _, err := MedianPoint(nil); err == nil {
		t.Fatal("no runs merged without an error")
	}
	if _, err := MedianPoint([]Point{{Name: PolicyKVRouter, QPS: 8}, {Name: PolicyRoundRobin, QPS: 8}}); err == nil {
		t.Fatal("two policies merged without an error")
	}
}

// A repeated sweep measures every point Repeats times on fresh fleets,
// rotating the policy order, and reports one median point per policy.
func TestSweepRepeatsAndRotates(t *testing.T) {
	var served, closed atomic.Int64
	var mu sync.Mutex
	var order []string
	factory := func(ctx context.Context, policy string) (Fleet, error) {
		mu.Lock()
		order = append(order, policy)
		mu.Unlock()
		return &fakeFleet{workers: []*httptest.Server{sseWorker(t, &served)}, closed: &closed}, nil
	}
	prompts, _ := SharedPrefixPrompts(SharedPrefixConfig{Groups: 2, PromptsPerGroup: 2, SystemTokens: 64, QuestionTokens: 16, OutputTokens: 3}, 4, 1)
	schedule := func(qps float64) ([]Request, error) { return PoissonSchedule(prompts, qps, 1) }
	cfg := SweepConfig{Workload: WorkloadSharedPrefix, QPS: []float64{200}, Seed: 7, Repeats: 3,
		Policies:  []string{PolicyKVRouter, PolicyKVRouterApprox, PolicyRoundRobin, PolicyOracle},
		BlockSize: 16, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Oracle: OracleFleet{Ranks: 2, BlockSize: 16, CacheBlocks: 1000, PrefillTokensPerSec: 1e6, MaxBatchedTokens: 8192, Speedup: 1}}
	rep, err := Sweep(context.Background(), cfg, schedule, factory)
	if err != nil {
		t.Fatal(err)
	}
	want := "kvrouter kvrouter_approx round_robin kvrouter_approx round_robin kvrouter round_robin kvrouter kvrouter_approx"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("fleets started in order\n%s\nwant\n%s", got, want)
	}
	if rep.Repeats != 3 || rep.Seed != 7 || len(rep.Policies) != 4 || served.Load() != 9*4 {
		t.Fatalf("report %+v, %d requests served", rep, served.Load())
	}
	for _, p := range rep.Policies {
		if p.TTFTFloorP90 <= 0 {
			t.Fatalf("%s: no TTFT floor in %+v", p.Name, p.Bounds)
		}
		if p.Name == PolicyOracle {
			continue
		}
		if p.Runs != 3 || p.Range == nil || p.HitRate != 0.5 || p.Range.HitRate != (Span{0.5, 0.5}) {
			t.Fatalf("point %+v (range %+v)", p, p.Range)
		}
	}
}
