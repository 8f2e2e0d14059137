package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/kvrouter/kvrouter/bench"
)

// demoPreset is the README's demo: 8 mock workers behind one router and a
// shared-prefix workload of 8 system prompts (3,000 tokens) with 16
// questions (150 tokens) each. Each worker's cache (800 blocks, 12,800
// tokens) holds about 4 system prompts: enough when each prompt stays on
// one worker, too few when round-robin sends all 8 everywhere. Prefill
// runs at 10,000 tokens/s, so a miss costs ~0.33 s and a hit ~25 ms, and
// round-robin saturates near 30 QPS; at 40 and 64 QPS it queues while
// KV routing still keeps up. A short cold-miss window (the first request of a prompt is
// invisible to the router until its prefill publishes the blocks) keeps
// the router's duplicate placements few against 10 s of traffic. The values come from replaying this workload
// through mockengine.Rank offline with perfect affinity vs round-robin.
func demoPreset(f *sweepFlags) {
	w := &f.workload
	w.Kind = bench.WorkloadSharedPrefix
	w.SharedPrefix = bench.SharedPrefixConfig{Groups: 8, PromptsPerGroup: 16, SystemTokens: 3000, QuestionTokens: 150, OutputTokens: 32}
	w.Duration = 8 * time.Second
	w.Requests = 0
	w.Seed = 1
	f.qps = "8,40,64"
	f.policies = "kvrouter,round_robin,random,least_loaded,oracle"
	f.out = "out/demo"
	f.fleet.Workers = 8
	f.fleet.BlockSize = 16
	f.fleet.Engine.Speedup = 1
	f.fleet.Engine.PrefillTokensPerSec = 10000
	f.fleet.Engine.TotalKVBlocks = 800
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f sweepFlags
	fs := flag.NewFlagSet("kvbench demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.register(fs)
	demoPreset(&f)
	// Flags given on the command line still override the preset.
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := f.traceRate(fs); err != nil {
		return err
	}
	f.finish()
	fmt.Fprintf(stdout, "kvbench demo: embedded NATS, 1 router, %d mock workers, shared-prefix sweep at qps %s (%s per point)\n",
		f.fleet.Workers, f.qps, f.workload.Duration)
	return execute(ctx, &f, stdout, stderr)
}
