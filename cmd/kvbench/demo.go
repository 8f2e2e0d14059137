package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/mockengine"
)

// demoPreset is the README's demo: 8 mock workers with the
// h100-llama3-8b preset (a cache of 434k tokens and 32.6k tokens/s of
// prefill each, derived from public numbers) behind one router, and
// llm-d's shared-prefix shape sized to that cache: 64 system prompts of
// 7,000 tokens (448k tokens, more than one worker holds) with 5 questions
// of 1,000 tokens each. Kept one prompt per worker, the prefixes fit 8
// times over; sent everywhere (round-robin), every worker thrashes. A
// miss costs 0.25 s of prefill and a hit 31 ms, so round-robin needs
// ~40 QPS of the fleet's prefill while KV routing needs ~5: at 16 QPS
// round-robin's engines are busy a third of the time and barely queue,
// at 40 and 64 they do. 360 requests per point, the first 120 of which
// warm the caches and are not measured (a production fleet runs warm;
// measured cold, each point would mostly count the first miss of every
// prompt). Values chosen by replaying the workload through
// mockengine.Rank offline for every policy.
//
// The light load is 16 QPS rather than 8 to keep the sweep near three
// minutes on two cores: a point lasts its requests over its rate, so at
// 8 QPS the four measured policies spent three of the sweep's four and a
// half minutes there. The 40 and 64 QPS points are unchanged.
func demoPreset(f *sweepFlags) error {
	w := &f.workload
	w.Kind = bench.WorkloadSharedPrefix
	w.SharedPrefix = bench.SharedPrefixConfig{Groups: 64, PromptsPerGroup: 5, SystemTokens: 7000, QuestionTokens: 1000, OutputTokens: 64}
	w.Duration = 0
	w.Requests = 360
	w.Seed = 1
	f.warmup = 120
	f.qps = "16,40,64"
	f.policies = "kvrouter,kvrouter_ttft,round_robin,least_loaded,oracle"
	f.out = "out/demo"
	f.fleet.Workers = 8
	f.fleet.BlockSize = 16
	f.fleet.Engine.Speedup = 1
	return nil
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f sweepFlags
	fs := flag.NewFlagSet("kvbench demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := f.registerPreset(fs, args, mockengine.PresetH100Llama3_8B); err != nil {
		return err
	}
	if err := demoPreset(&f); err != nil {
		return err
	}
	// Flags given on the command line still override the preset.
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := tuneAsServed(); err != nil {
		return err
	}
	if err := f.traceRate(fs); err != nil {
		return err
	}
	f.finish()
	if err := f.fleet.Finish(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "kvbench demo: embedded NATS, 1 router, %d mock workers (%s), shared-prefix sweep at qps %s (%d requests per point, the first %d warming the caches)\n",
		f.fleet.Workers, f.fleet.Preset, f.qps, f.workload.Requests, f.warmup)
	return execute(ctx, &f, stdout, stderr)
}
