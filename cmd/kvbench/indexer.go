package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/replica"
)

func runIndexer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := bench.IndexerBenchConfig{}
	var logLevel, eventRates, speedups, out, cpuProfile, memProfile, tracePath string
	var lookupRate float64
	var step, warmup time.Duration
	var maxInFlight, gcPercent int
	var warm, steady, statusDigest bool
	var statusEvery, dumpEvery time.Duration
	var memoryLimit string
	fs := flag.NewFlagSet("kvbench indexer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Plan.Workers, "workers", 1000, "engines the trace's requests are spread over (round-robin)")
	fs.IntVar(&cfg.Plan.BlockSize, "block-size", 64, "router block size; must divide the trace's 512-token blocks")
	fs.IntVar(&cfg.Plan.CapacityBlocks, "capacity-blocks", 16384, "each worker's cache in router blocks; LRU blocks are removed beyond it")
	fs.StringVar(&cfg.TracePath, "trace", "", "Mooncake trace file, JSON lines, .gz for gzip (default: the embedded conversation trace)")
	fs.IntVar(&cfg.Requests, "requests", 0, "trace lines to replay (0 = all)")
	fs.IntVar(&cfg.Queriers, "queriers", 2, "unpaced replay: goroutines issuing routing queries (update_states=false) during the replay")
	fs.IntVar(&cfg.SyncEvery, "sync-every", 64, "unpaced replay: trace requests between waits for the shards to catch up")
	fs.IntVar(&cfg.Shards, "shards", 0, "indexer shards (0 = GOMAXPROCS)")
	fs.BoolVar(&cfg.FullRoute, "full-route", false, "time whole routing decisions instead of index lookups (Dynamo's benchmark times lookups)")
	fs.StringVar(&eventRates, "event-rate", "", "paced replay: KV events/s, comma-separated (e.g. 10000,20000,30000); one fresh router per rate, the trace looped as needed")
	fs.StringVar(&speedups, "speedup", "", "paced replay: the trace's own timing divided by these factors, comma-separated (instead of --event-rate)")
	fs.Float64Var(&lookupRate, "lookup-rate", 1000, "paced replay: lookups/s, open loop, timed from their scheduled time")
	fs.DurationVar(&step, "step", 6*time.Second, "paced replay: how long each rate runs")
	fs.DurationVar(&warmup, "warmup", time.Second, "paced replay: start of each step whose lookups are not counted")
	fs.IntVar(&maxInFlight, "max-in-flight", 4096, "paced replay: most lookups outstanding at once (a lookup due past it waits; its wait counts)")
	fs.StringVar(&out, "out", "", "paced replay: write the report as JSON to this file")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (a paced replay's covers its steps and warm-up pass, not the planning or a steady run's fill)")
	fs.StringVar(&tracePath, "exec-trace", "", "paced replay: write a Go execution trace of the steps to this file (go tool trace; large: keep steps short)")
	fs.StringVar(&memProfile, "memprofile", "", "paced replay: write a heap profile to this file as each step ends (the index is still full then; the last step's stays)")
	fs.BoolVar(&steady, "steady", false, "paced replay: fill the index once (unpaced, until the fleet's caches are 95% full) and run every step on from there without clearing it: an index at steady state, where each store follows an eviction (default: each step fills an emptied index)")
	fs.DurationVar(&statusEvery, "status-every", 0, "paced replay: ask for the router's status at this interval during each step, as a metrics scrape does (0 = never)")
	fs.BoolVar(&statusDigest, "status-digest", false, "paced replay: with --status-every, ask for the index digest too (GET /workers?digest=1)")
	fs.DurationVar(&dumpEvery, "dump-every", 0, "paced replay: dump the index at this interval during each step, as the snapshot replica does (0 = never)")
	fs.BoolVar(&warm, "warm", true, "paced replay: run the highest rate once before the measured steps and report it apart (a fresh process faults its heap in on that pass)")
	routerDefaults := config.Default()
	fs.IntVar(&gcPercent, "gc-percent", routerDefaults.GCPercent, "Go GC target, as kvrouter serve's --gc-percent (GOGC in the environment wins)")
	fs.StringVar(&memoryLimit, "memory-limit", routerDefaults.MemoryLimit, "Go soft memory limit, as kvrouter serve's --memory-limit (GOMEMLIMIT in the environment wins)")
	fs.StringVar(&logLevel, "log-level", "warn", "log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	log, err := newLogger(stderr, logLevel)
	if err != nil {
		return err
	}
	cfg.Logger = log
	// The router under test runs with kvrouter serve's runtime settings.
	rtCfg := config.Default()
	rtCfg.GCPercent, rtCfg.MemoryLimit = gcPercent, memoryLimit
	rt, err := replica.TuneRuntime(rtCfg, os.Getenv, log)
	if err != nil {
		return err
	}
	// The CPU profile and the execution trace start once the run is set
	// up (for a paced replay: planned and, when steady, filled).
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	startCaptures := func() error {
		for _, c := range []struct {
			path, what string
			start      func(io.Writer) error
			stop       func()
		}{
			{cpuProfile, "cpu profile", pprof.StartCPUProfile, pprof.StopCPUProfile},
			{tracePath, "execution trace", trace.Start, trace.Stop},
		} {
			if c.path == "" {
				continue
			}
			stop, err := startCapture(c.path, c.start, c.stop)
			if err != nil {
				return fmt.Errorf("%s: %w", c.what, err)
			}
			stops = append(stops, stop)
		}
		return nil
	}
	if eventRates == "" && speedups == "" {
		if err := startCaptures(); err != nil {
			return err
		}
		if out != "" {
			return fmt.Errorf("--out needs a paced replay (--event-rate or --speedup)")
		}
		res, err := bench.RunIndexerBench(ctx, cfg)
		if err != nil {
			return err
		}
		res.WriteText(stdout)
		return nil
	}
	paces, err := parsePaces(eventRates, speedups)
	if err != nil {
		return err
	}
	rep, err := bench.RunIndexerRates(ctx, bench.IndexerRateConfig{
		Plan: cfg.Plan, TracePath: cfg.TracePath, Requests: cfg.Requests, Shards: cfg.Shards, Paces: paces,
		LookupRate: lookupRate, Step: step, Warmup: warmup, MaxInFlight: maxInFlight, FullRoute: cfg.FullRoute, Logger: log,
		Warm: warm, Steady: steady, GCPercent: rt.GCPercent, MemoryLimit: rt.MemoryLimit,
		StatusEvery: statusEvery, StatusDigest: statusDigest, DumpEvery: dumpEvery,
		BeforeSteps: startCaptures,
		OnPoint: func(p bench.IndexerRatePoint) {
			fmt.Fprintf(stderr, "rate %.0f/s done: %.0f events/s, lookup p99 %.3f ms\n", p.TargetEventsPerSec, p.EventsPerSec, p.LookupMs.P99)
			if memProfile != "" {
				if err := writeHeapProfile(memProfile); err != nil {
					fmt.Fprintf(stderr, "heap profile: %v\n", err)
				}
			}
		},
	})
	if len(rep.Points) > 0 {
		rep.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	if out != "" {
		if err := writeJSONFile(out, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report: %s\n", out)
	}
	return nil
}

// parsePaces turns --event-rate or --speedup (not both) into paces.
func parsePaces(eventRates, speedups string) ([]bench.EventPace, error) {
	if eventRates != "" && speedups != "" {
		return nil, fmt.Errorf("--event-rate and --speedup are exclusive")
	}
	flagName, list := "--event-rate", eventRates
	if speedups != "" {
		flagName, list = "--speedup", speedups
	}
	var out []bench.EventPace
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		x, err := strconv.ParseFloat(part, 64)
		if err != nil || !(x > 0) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%s: %q is not a positive number", flagName, part)
		}
		if speedups != "" {
			out = append(out, bench.EventPace{Speedup: x})
		} else {
			out = append(out, bench.EventPace{Rate: x})
		}
	}
	return out, nil
}

// writeHeapProfile collects garbage (the profile is as of the last GC)
// and writes the heap profile to path.
func writeHeapProfile(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// startCapture writes a capture (a CPU profile, an execution trace) to
// path from now on; the returned func ends it and closes the file.
func startCapture(path string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { stop(); f.Close() }, nil
}
