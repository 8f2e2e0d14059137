package bench

import (
	"context"
	"testing"
	"time"
)

// Two policies against 2 real mock workers behind a real router replica
// (embedded NATS, KV events, proxy). A group's second request must hit
// through the router: it sees the first request's blocks.
func TestEndToEndKVRouterAndRoundRobin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS, a router and mock workers")
	}
	opts := fastFleetOptions(2)
	factory, err := EmbeddedFleetFactory(opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	prompts, _ := SharedPrefixPrompts(SharedPrefixConfig{Groups: 2, PromptsPerGroup: 4, SystemTokens: 512, QuestionTokens: 32, OutputTokens: 4}, 16, 3)
	schedule := func(qps float64) ([]Request, error) {
		reqs, err := PoissonSchedule(prompts, qps, 3)
		for i := range reqs {
			reqs[i].Arrival = time.Duration(i) * 60 * time.Millisecond // events land between requests
		}
		return reqs, err
	}
	cfg := SweepConfig{Workload: WorkloadSharedPrefix, QPS: []float64{16}, Policies: []string{PolicyKVRouter, PolicyRoundRobin, PolicyOracle},
		BlockSize: 16, Model: opts.Engine.ModelName, Logger: opts.Logger}
	rep, err := Sweep(context.Background(), cfg, schedule, factory)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Point{}
	for _, p := range rep.Policies {
		got[p.Name] = p
	}
	kvp, rr, or := got[PolicyKVRouter], got[PolicyRoundRobin], got[PolicyOracle]
	if kvp.Errors != 0 || rr.Errors != 0 {
		t.Fatalf("errors: kvrouter %d, round_robin %d", kvp.Errors, rr.Errors)
	}
	if kvp.HitRate < 0.95*or.HitRate {
		t.Fatalf("kvrouter hit rate %.3f below 0.95 x oracle %.3f (round robin %.3f)", kvp.HitRate, or.HitRate, rr.HitRate)
	}
	if kvp.HitRate <= rr.HitRate {
		t.Fatalf("kvrouter hit rate %.3f not above round robin %.3f", kvp.HitRate, rr.HitRate)
	}
}

// Approximate mode behind the same fleet: the router predicts the cache
// from its own decisions (the workers publish no KV events), and a
// group's later requests still hit.
func TestEndToEndApproximateMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS, a router and mock workers")
	}
	opts := fastFleetOptions(2)
	factory, err := EmbeddedFleetFactory(opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	prompts, _ := SharedPrefixPrompts(SharedPrefixConfig{Groups: 2, PromptsPerGroup: 4, SystemTokens: 512, QuestionTokens: 32, OutputTokens: 4}, 16, 3)
	schedule := func(qps float64) ([]Request, error) {
		reqs, err := PoissonSchedule(prompts, qps, 3)
		for i := range reqs {
			reqs[i].Arrival = time.Duration(i) * 60 * time.Millisecond
		}
		return reqs, err
	}
	cfg := SweepConfig{Workload: WorkloadSharedPrefix, QPS: []float64{16}, Policies: []string{PolicyKVRouterApprox, PolicyOracle},
		BlockSize: 16, Model: opts.Engine.ModelName, Logger: opts.Logger}
	rep, err := Sweep(context.Background(), cfg, schedule, factory)
	if err != nil {
		t.Fatal(err)
	}
	approx, or := rep.Policies[0], rep.Policies[1]
	if approx.Name != PolicyKVRouterApprox || approx.Errors != 0 || approx.HitRate < 0.95*or.HitRate {
		t.Fatalf("approximate mode %+v against oracle %.3f", approx, or.HitRate)
	}
}
