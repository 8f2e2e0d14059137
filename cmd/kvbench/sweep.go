package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kvrouter/kvrouter/bench"
)

// defaultQPS is run's --qps for the synthetic workloads. A Mooncake
// replay has its own rate (the trace's, times --time-scale), so this
// default does not apply to it.
const defaultQPS = "2,4,8"

// sweepFlags are the flags of run (and the knobs demo presets).
type sweepFlags struct {
	workload bench.WorkloadOptions
	qps      string
	policies string
	fleet    bench.FleetOptions
	out      string
	timeout  time.Duration
	warmup   int
	repeats  int
	logLevel string
}

func (f *sweepFlags) register(fs *flag.FlagSet) {
	f.fleet.Register(fs)
	f.registerRest(fs)
}

// registerPreset registers the flags with the engine defaults of the
// --preset in args (or fallback): see bench.FleetOptions.RegisterPreset.
func (f *sweepFlags) registerPreset(fs *flag.FlagSet, args []string, fallback string) error {
	if err := f.fleet.RegisterPreset(fs, args, fallback); err != nil {
		return err
	}
	f.registerRest(fs)
	return nil
}

func (f *sweepFlags) registerRest(fs *flag.FlagSet) {
	registerWorkload(fs, &f.workload)
	fs.StringVar(&f.qps, "qps", defaultQPS, "comma-separated offered loads (requests/s); mooncake defaults to none: the trace's own rate times --time-scale")
	fs.StringVar(&f.policies, "policies", "kvrouter,kvrouter_dynamo,round_robin,random,least_loaded,oracle", "comma-separated policies: kvrouter (the router's default cost, --router-cost ttft), kvrouter_dynamo (--router-cost dynamo: Dynamo's cost), kvrouter_approx (approximate mode: --use-kv-events=false, with Dynamo's cost), round_robin, random, least_loaded, oracle (the hit-rate bounds only)")
	fs.IntVar(&f.repeats, "repeats", 3, "runs of each (policy, QPS) point, each on a fresh fleet with the policy order rotated between runs; the report gives each figure's median and range (one run on a shared machine is not evidence)")
	fs.StringVar(&f.out, "out", "out/run", "directory for report.json and the plots")
	fs.DurationVar(&f.timeout, "request-timeout", 2*time.Minute, "longest a single request may take")
	fs.IntVar(&f.warmup, "warmup", 0, "leading requests of each point that only warm the caches: sent, but left out of its figures and oracles")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log level of the embedded fleet and the sweep")
}

// registerWorkload registers the flags that describe a workload.
func registerWorkload(fs *flag.FlagSet, w *bench.WorkloadOptions) {
	fs.StringVar(&w.Kind, "workload", bench.WorkloadSharedPrefix, "shared-prefix, multi-turn, random or mooncake")
	fs.IntVar(&w.SharedPrefix.Groups, "groups", 150, "shared-prefix: number of system prompts")
	fs.IntVar(&w.SharedPrefix.PromptsPerGroup, "prompts-per-group", 5, "shared-prefix: questions per system prompt")
	fs.IntVar(&w.SharedPrefix.SystemTokens, "system-tokens", 6000, "shared-prefix, multi-turn: system prompt tokens")
	fs.IntVar(&w.SharedPrefix.QuestionTokens, "question-tokens", 1200, "shared-prefix: question tokens")
	fs.IntVar(&w.MultiTurn.Conversations, "conversations", 32, "multi-turn: conversations in flight at a time")
	fs.IntVar(&w.MultiTurn.Turns, "turns", 5, "multi-turn: turns per conversation")
	fs.IntVar(&w.MultiTurn.UserTokens, "user-tokens", 200, "multi-turn: tokens of each user message")
	fs.IntVar(&w.Random.InputTokens, "input-tokens", 2000, "random: prompt tokens")
	fs.IntVar(&w.SharedPrefix.OutputTokens, "output-tokens", 100, "tokens generated per request (every synthetic workload)")
	fs.StringVar(&w.TracePath, "trace", "", "mooncake: trace file, JSON lines, .gz for gzip (default: the embedded Mooncake conversation trace)")
	fs.Float64Var(&w.TimeScale, "time-scale", 1, "mooncake: replay this many times faster than recorded (ignored with --qps, which sets the rate itself)")
	fs.IntVar(&w.Requests, "requests", 0, "requests per point (mooncake: trace lines to replay; 0 = all)")
	fs.DurationVar(&w.Duration, "duration", 20*time.Second, "synthetic workloads without --requests: arrivals span this long per point")
	fs.Uint64Var(&w.Seed, "seed", 1, "seed of every random choice: the synthetic workloads' prompts and arrivals, the random policy's picks; in a mooncake replay of --requests lines it picks the trace window (seed N starts at line (N-1)×requests, wrapping); the router's tie-breaks are not seeded")
}

// finish copies the shared output length into every synthetic workload.
func (f *sweepFlags) finish() { finishWorkload(&f.workload) }

func finishWorkload(w *bench.WorkloadOptions) {
	w.MultiTurn.SystemTokens = w.SharedPrefix.SystemTokens
	w.MultiTurn.OutputTokens = w.SharedPrefix.OutputTokens
	w.Random.OutputTokens = w.SharedPrefix.OutputTokens
}

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f sweepFlags
	fs := flag.NewFlagSet("kvbench run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := f.registerPreset(fs, args, ""); err != nil {
		return err
	}
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
	return execute(ctx, &f, stdout, stderr)
}

// traceRate decides how a Mooncake replay is paced: by --qps when it was
// given, else by the trace's own rate times --time-scale (the --qps
// default is the synthetic workloads' and would silently override the
// time scale). Both given is ambiguous and refused.
func (f *sweepFlags) traceRate(fs *flag.FlagSet) error {
	if f.workload.Kind != bench.WorkloadMooncake {
		return nil
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	switch {
	case set["qps"] && set["time-scale"]:
		return fmt.Errorf("mooncake: give --qps or --time-scale, not both (--qps %s would override --time-scale %v)",
			f.qps, f.workload.TimeScale)
	case !set["qps"]:
		f.qps = ""
	}
	return nil
}

// execute runs the sweep f describes and writes the table, the ratios,
// report.json and the plots.
func execute(ctx context.Context, f *sweepFlags, stdout, stderr io.Writer) error {
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return err
	}
	qps, err := bench.ParseQPSList(f.qps)
	if err != nil {
		return err
	}
	policies, err := bench.ParsePolicies(f.policies)
	if err != nil {
		return err
	}
	schedule, qps, err := f.workload.Build(qps)
	if err != nil {
		return err
	}
	f.fleet.Logger = log
	fleetDir := filepath.Join(f.out, "fleet")
	factory, err := bench.EmbeddedFleetFactory(f.fleet, fleetDir)
	if err != nil {
		return err
	}
	// Every fleet removes its own data directory when it stops; the parent
	// is removed once empty so a finished run leaves only its results.
	defer os.Remove(fleetDir)
	cfg := bench.SweepConfig{
		Workload: f.workload.Kind, QPS: qps, Policies: policies, BlockSize: f.fleet.BlockSize, Oracle: f.fleet.OracleFleet(),
		RequestTimeout: f.timeout, Seed: f.workload.Seed, Model: f.fleet.Engine.ModelName, Logger: log, Warmup: f.warmup,
		Progress: stderr, Repeats: f.repeats,
	}
	if f.repeats < 1 {
		return fmt.Errorf("%w: --repeats must be >= 1, got %d", bench.ErrBadWorkload, f.repeats)
	}
	fmt.Fprintf(stderr, "computing the workload's oracle bounds, then %d runs (each policy but oracle at each load, %d times), a fresh fleet each\n",
		measuredPoints(policies, qps)*f.repeats, f.repeats)
	start := time.Now()
	rep, err := bench.Sweep(ctx, cfg, schedule, factory)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nworkload %s, seed %d, %d workers, %d run(s) per point, sweep took %s\n\n",
		f.workload.Kind, f.workload.Seed, f.fleet.Workers, f.repeats, time.Since(start).Round(time.Second))
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	bench.WriteLegend(stdout)
	fmt.Fprintln(stdout)
	rep.WriteRatios(stdout)
	path, err := rep.WriteJSON(f.out)
	if err != nil {
		return err
	}
	plots, err := rep.WritePlots(f.out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nreport: %s\n", path)
	for _, p := range plots {
		fmt.Fprintf(stdout, "plot:   %s\n", p)
	}
	if len(rep.Summary()) > 0 {
		fmt.Fprintln(stdout)
		rep.WriteSummary(stdout)
	}
	return nil
}

// measuredPoints is how many fleets a sweep starts: every policy at
// every load, except the oracle, which is computed.
func measuredPoints(policies []string, qps []float64) int {
	n := 0
	for _, p := range policies {
		if p != bench.PolicyOracle {
			n++
		}
	}
	return n * len(qps)
}
