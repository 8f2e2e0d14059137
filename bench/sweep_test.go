package bench

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// fakeFleet serves completions from httptest SSE workers; the first one
// doubles as the "router".
type fakeFleet struct {
	workers []*httptest.Server
	closed  *atomic.Int64
}

func (f *fakeFleet) RouterURLs() []string { return []string{f.workers[0].URL} }
func (f *fakeFleet) WorkerURLs() []string {
	var out []string
	for _, w := range f.workers {
		out = append(out, w.URL)
	}
	return out
}
func (f *fakeFleet) Close(context.Context) error {
	for _, w := range f.workers {
		w.Close()
	}
	f.closed.Add(1)
	return nil
}

func TestSweepStartsAFleetPerPoint(t *testing.T) {
	var served, started, closed atomic.Int64
	factory := func(ctx context.Context, policy string) (Fleet, error) {
		started.Add(1)
		return &fakeFleet{workers: []*httptest.Server{sseWorker(t, &served), sseWorker(t, &served)}, closed: &closed}, nil
	}
	prompts, _ := SharedPrefixPrompts(SharedPrefixConfig{Groups: 2, PromptsPerGroup: 2, SystemTokens: 64, QuestionTokens: 16, OutputTokens: 3}, 6, 1)
	schedule := func(qps float64) ([]Request, error) { return PoissonSchedule(prompts, qps, 1) }
	cfg := SweepConfig{Workload: WorkloadSharedPrefix, QPS: []float64{100, 200}, Policies: []string{PolicyKVRouter, PolicyRoundRobin, PolicyOracle},
		BlockSize: 16, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Oracle: OracleFleet{Ranks: 2, BlockSize: 16, CacheBlocks: 1000, PrefillTokensPerSec: 1e6, MaxBatchedTokens: 8192, Speedup: 1}}
	rep, err := Sweep(context.Background(), cfg, schedule, factory)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Policies) != 6 {
		t.Fatalf("got %d points, want 6", len(rep.Policies))
	}
	if started.Load() != 4 || closed.Load() != 4 {
		t.Fatalf("started %d fleets, closed %d; want 4 each (oracle needs none)", started.Load(), closed.Load())
	}
	if served.Load() != 24 {
		t.Fatalf("served %d requests, want 4 runs x 6", served.Load())
	}
	for _, p := range rep.Policies {
		if !(p.Unbounded > 0 && p.Capacity <= p.Unbounded && p.Timed <= p.Capacity) {
			t.Fatalf("%s at %v: bounds %+v", p.Name, p.QPS, p.Bounds)
		}
		if p.Name == PolicyOracle && (p.HitRate <= 0 || p.HitRate >= 1 || p.HitRate != p.Unbounded) {
			t.Fatalf("oracle hit rate %v", p.HitRate)
		}
		if p.Name != PolicyOracle && (p.Errors != 0 || p.HitRate != 0.5) {
			t.Fatalf("point %+v", p)
		}
	}
}

func TestSweepStopsOnFleetFailure(t *testing.T) {
	boom := errors.New("no ports")
	factory := func(context.Context, string) (Fleet, error) { return nil, boom }
	schedule := func(qps float64) ([]Request, error) { return nil, nil }
	cfg := SweepConfig{QPS: []float64{1}, Policies: []string{PolicyRoundRobin}, BlockSize: 16,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := Sweep(context.Background(), cfg, schedule, factory); !errors.Is(err, boom) {
		t.Fatalf("got %v, want the fleet error", err)
	}
}
