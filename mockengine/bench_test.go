package mockengine

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkRankStep measures the engine's own cost per simulated step with
// a full batch of 256 decoding requests (the bound on how fast a mock
// worker can run with a high speedup).
func BenchmarkRankStep(b *testing.B) {
	cfg := DefaultConfig()
	r, err := NewRank(cfg, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	next := 0
	add := func() {
		next++
		if err := r.Add(Request{ID: strconv.Itoa(next), Prompt: seqTokens(next*1000, 512), MaxTokens: 200}); err != nil {
			b.Fatal(err)
		}
	}
	for range cfg.MaxNumSeqs {
		add()
	}
	r.Step()
	for b.Loop() {
		outs, _ := r.Step()
		for _, o := range outs {
			if o.Finished {
				add() // keep the batch full
			}
		}
	}
	b.ReportMetric(float64(cfg.MaxNumSeqs), "seqs/step")
}

// BenchmarkFleetSimulation replays 400 shared-prefix requests on 4 ranks
// under both policies and reports the simulated mean TTFT.
func BenchmarkFleetSimulation(b *testing.B) {
	reqs := sharedPrefixWorkload(400, 16, 1024, 64, 10*time.Millisecond)
	for _, p := range []struct {
		name string
		pick pickFunc
	}{{"round_robin", roundRobin}, {"kv_aware", kvAware}} {
		b.Run(p.name, func(b *testing.B) {
			var res simResult
			for b.Loop() {
				res = simulate(b, simConfig(), 4, reqs, 32, p.pick)
			}
			b.ReportMetric(float64(res.meanTTFT)/float64(time.Millisecond), "sim_ttft_ms")
			b.ReportMetric(res.makespan.Seconds(), "sim_makespan_s")
			b.ReportMetric(res.hitRate, "hit_rate")
		})
	}
}
