package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/internal/version"
	"github.com/kvrouter/kvrouter/mockengine"
)

// runArgs runs kvbench with args and returns its error and output.
func runArgs(t *testing.T, args ...string) (error, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	return err, stdout.String(), stderr.String()
}

func TestRunDispatch(t *testing.T) {
	err, _, stderr := runArgs(t)
	if err == nil || !strings.Contains(err.Error(), "missing command") || !strings.Contains(stderr, "usage: kvbench") {
		t.Errorf("no command: %v, stderr %q", err, stderr)
	}
	err, _, stderr = runArgs(t, "bogus")
	if err == nil || !strings.Contains(err.Error(), `unknown command "bogus"`) || !strings.Contains(stderr, "commands:") {
		t.Errorf("unknown command: %v", err)
	}
	err, stdout, _ := runArgs(t, "help")
	if err != nil || !strings.Contains(stdout, "http ") || !strings.Contains(stdout, "scale ") {
		t.Errorf("help: %v, %q", err, stdout)
	}
}

// TestSubcommandsRejectBadArguments checks that every subcommand refuses
// malformed arguments with a clear error before it starts anything.
func TestSubcommandsRejectBadArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // in the error, or in stderr for flag-package errors
	}{
		{[]string{"run", "--qps", "abc"}, `qps "abc" is not a positive number`},
		{[]string{"run", "--qps", "-2"}, `qps "-2" is not a positive number`},
		{[]string{"run", "--policies", "kvrouter,magic"}, `"magic"`},
		{[]string{"run", "--policies", "kvrouter_ttft"}, "use kvrouter (the default cost, ttft) or kvrouter_dynamo"},
		{[]string{"run", "--workload", "nope"}, `unknown workload "nope"`},
		{[]string{"run", "--workers", "0"}, "at least one worker"},
		{[]string{"run", "--log-level", "loud"}, `log level "loud"`},
		{[]string{"run", "--requests", "-1"}, "requests must be >= 0"},
		{[]string{"run", "extra"}, "unexpected arguments: [extra]"},
		{[]string{"run", "--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"run", "--qps", "1", "--duration", "0s"}, "give a request count or a duration"},
		{[]string{"run", "--workload", "mooncake", "--qps", "3", "--time-scale", "2"}, "give --qps or --time-scale, not both"},
		{[]string{"run", "--workload", "mooncake", "--trace", "/nonexistent/trace.jsonl"}, "open trace"},
		{[]string{"demo", "extra"}, "unexpected arguments: [extra]"},
		{[]string{"demo", "--workers", "x"}, `invalid value "x" for flag -workers`},
		{[]string{"indexer", "--log-level", "loud"}, `log level "loud"`},
		{[]string{"indexer", "extra"}, "unexpected arguments"},
		{[]string{"indexer", "--event-rate", "1000,x"}, `--event-rate: "x" is not a positive number`},
		{[]string{"indexer", "--event-rate", "-5"}, `--event-rate: "-5" is not a positive number`},
		{[]string{"indexer", "--speedup", "0"}, `--speedup: "0" is not a positive number`},
		{[]string{"indexer", "--event-rate", "1000", "--speedup", "10"}, "exclusive"},
		{[]string{"indexer", "--out", "x.json"}, "--out needs a paced replay"},
		{[]string{"indexer", "--event-rate", "1000", "--warmup", "10s", "--step", "5s"}, "warmup in [0, step)"},
		{[]string{"load"}, "--target is required"},
		{[]string{"load", "--target", "http://127.0.0.1:1", "--workload", "nope"}, `unknown workload "nope"`},
		{[]string{"load", "--target", "http://127.0.0.1:1", "--qps", "0"}, "qps"},
		{[]string{"scale", "--replicas", "0"}, `replica count "0": want a positive integer`},
		{[]string{"scale", "--replicas", "1,x"}, `replica count "x"`},
		{[]string{"scale", "--rounds", "many"}, `invalid value "many" for flag -rounds`},
		{[]string{"http", "--rate", "0"}, "--rate must be a positive number"},
	} {
		err, _, stderr := runArgs(t, c.args...)
		if err == nil {
			t.Errorf("%v: accepted", c.args)
			continue
		}
		if !strings.Contains(err.Error(), c.want) && !strings.Contains(stderr, c.want) {
			t.Errorf("%v: error %q (stderr %q), want it to mention %q", c.args, err, stderr, c.want)
		}
	}
}

func TestSubcommandHelp(t *testing.T) {
	if err, stdout, _ := runArgs(t, "--version"); err != nil || stdout != "kvbench "+version.Get().String()+"\n" {
		t.Errorf("--version: %v, stdout %q", err, stdout)
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		if err, stdout, _ := runArgs(t, args...); exitCode(err) != 0 || !strings.Contains(stdout, "commands:") {
			t.Errorf("%v: exit %d (%v), stdout %q", args, exitCode(err), err, stdout)
		}
	}
	for _, cmd := range []string{"run", "demo", "indexer", "load", "scale", "http"} {
		err, _, stderr := runArgs(t, cmd, "-h")
		if !errors.Is(err, flag.ErrHelp) || exitCode(err) != 0 {
			t.Errorf("%s -h: %v (exit %d), want flag.ErrHelp and exit 0", cmd, err, exitCode(err))
		}
		if err, _, _ := runArgs(t, cmd, "--help"); exitCode(err) != 0 {
			t.Errorf("%s --help: exit %d (%v)", cmd, exitCode(err), err)
		}
		if !strings.Contains(stderr, "-duration") && !strings.Contains(stderr, "-requests") {
			t.Errorf("%s -h printed no flags: %q", cmd, stderr)
		}
	}
}

func TestFinishWorkloadSharesOutputLength(t *testing.T) {
	var f sweepFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse([]string{"--output-tokens", "77", "--system-tokens", "900"}); err != nil {
		t.Fatal(err)
	}
	f.finish()
	w := f.workload
	if w.MultiTurn.OutputTokens != 77 || w.Random.OutputTokens != 77 || w.MultiTurn.SystemTokens != 900 {
		t.Errorf("multi-turn %+v, random %+v: the shared flags were not copied", w.MultiTurn, w.Random)
	}
}

func TestDemoPresetYieldsToFlags(t *testing.T) {
	var f sweepFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.register(fs)
	if err := demoPreset(&f); err != nil {
		t.Fatal(err)
	}
	if f.fleet.Workers != 8 || f.qps != "16,40,64" || f.out != "out/demo" || f.warmup != 120 {
		t.Fatalf("preset not applied: workers %d qps %s out %s warm-up %d", f.fleet.Workers, f.qps, f.out, f.warmup)
	}
	if err := fs.Parse([]string{"--workers", "3", "--qps", "5", "--warmup", "0"}); err != nil {
		t.Fatal(err)
	}
	if f.fleet.Workers != 3 || f.qps != "5" || f.workload.SharedPrefix.Groups != 64 || f.warmup != 0 {
		t.Errorf("after flags: workers %d qps %s groups %d warm-up %d; want 3, 5, the preset's 64 and 0",
			f.fleet.Workers, f.qps, f.workload.SharedPrefix.Groups, f.warmup)
	}
	var d sweepFlags
	dfs := flag.NewFlagSet("t", flag.ContinueOnError)
	if err := d.registerPreset(dfs, nil, mockengine.PresetH100Llama3_8B); err != nil {
		t.Fatal(err)
	}
	if want, _ := mockengine.Preset(mockengine.PresetH100Llama3_8B); d.fleet.Engine.TotalKVBlocks != want.TotalKVBlocks {
		t.Errorf("the demo's fleet is not the h100 preset: %+v", d.fleet.Engine)
	}
}

func TestNewLogger(t *testing.T) {
	if _, err := newLogger(&bytes.Buffer{}, "debug"); err != nil {
		t.Error(err)
	}
	if _, err := newLogger(&bytes.Buffer{}, "chatty"); err == nil {
		t.Error("unknown level accepted")
	}
}

// An oracle-only Mooncake run needs no fleet: it replays the embedded
// trace at its own rate times --time-scale (not at --qps's default) and
// writes report.json without the latency plots it has no points for.
func TestOracleOnlyMooncakeRun(t *testing.T) {
	out := t.TempDir()
	err, stdout, stderr := runArgs(t, "run", "--workload", "mooncake", "--policies", "oracle",
		"--requests", "200", "--time-scale", "2", "--out", out)
	if err != nil {
		t.Fatalf("%v\nstdout %s\nstderr %s", err, stdout, stderr)
	}
	rep, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r bench.Report
	if err := json.Unmarshal(rep, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Policies) != 1 {
		t.Fatalf("points %+v, want one (the trace's own rate, not --qps's default three)", r.Policies)
	}
	recs, err := bench.LoadTrace("", 200)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * bench.TraceQPS(recs); math.Abs(r.Policies[0].QPS-want) > 1e-9 {
		t.Errorf("qps %v, want the trace's rate x 2 = %v", r.Policies[0].QPS, want)
	}
}

// --preset sets the engine flags' defaults wherever it appears; engine
// flags given explicitly still win.
func TestRunPresetDefaults(t *testing.T) {
	var f sweepFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	args := []string{"--kv-blocks", "100", "--preset", mockengine.PresetH100Llama3_8B}
	if err := f.registerPreset(fs, args, ""); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	want, _ := mockengine.Preset(mockengine.PresetH100Llama3_8B)
	e := f.fleet.Engine
	if e.TotalKVBlocks != 100 || e.PrefillTokensPerSec != want.PrefillTokensPerSec || e.StepBaseTime != want.StepBaseTime ||
		e.DecodeKVTokensPerSec != want.DecodeKVTokensPerSec || f.fleet.Preset != mockengine.PresetH100Llama3_8B {
		t.Fatalf("engine %+v preset %q", e, f.fleet.Preset)
	}
	if o := f.fleet.OracleFleet(); o.CacheBlocks != 100 || o.PrefillTokensPerSec != want.PrefillTokensPerSec || o.Ranks != 8 {
		t.Fatalf("oracle fleet %+v", o)
	}
	err, _, _ := runArgs(t, "run", "--preset", "tpu-9000")
	if !errors.Is(err, mockengine.ErrUnknownPreset) {
		t.Fatalf("unknown preset: %v", err)
	}
}

func TestParsePaces(t *testing.T) {
	for _, c := range []struct {
		rates, speedups string
		want            []bench.EventPace
	}{
		{"1000, 30000", "", []bench.EventPace{{Rate: 1000}, {Rate: 30000}}},
		{"", "10,2.5", []bench.EventPace{{Speedup: 10}, {Speedup: 2.5}}},
	} {
		got, err := parsePaces(c.rates, c.speedups)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("parsePaces(%q, %q) = %v, %v; want %v", c.rates, c.speedups, got, err, c.want)
		}
	}
}

// A paced indexer run writes its JSON report with one point per rate.
func TestIndexerPacedWritesJSON(t *testing.T) {
	out := filepath.Join(t.TempDir(), "indexer.json")
	err, stdout, stderr := runArgs(t, "indexer", "--workers", "3", "--requests", "100", "--event-rate", "200,400",
		"--lookup-rate", "40", "--step", "300ms", "--warmup", "50ms", "--out", out, "--log-level", "error")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.IndexerRateReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Points) != 2 || rep.Points[1].TargetEventsPerSec != 400 || rep.Points[0].Lookups == 0 {
		t.Fatalf("report %+v", rep)
	}
	if !strings.Contains(stdout, "target/s") {
		t.Fatalf("no table on stdout:\n%s", stdout)
	}
}

// A preset runs at real speed unless --speedup is given, wherever it
// stands on the command line; without a preset the default stays 10.
func TestSpeedupWithPreset(t *testing.T) {
	h100 := mockengine.PresetH100Llama3_8B
	for _, c := range []struct {
		args []string
		want float64
	}{
		{[]string{"--preset", h100}, 1},
		{[]string{"--preset", h100, "--speedup", "10"}, 10},
		{[]string{"--speedup", "4", "--preset=" + h100}, 4},
		{nil, bench.DefaultSpeedup},
		{[]string{"--speedup", "2"}, 2},
	} {
		var f sweepFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		if err := f.registerPreset(fs, c.args, ""); err != nil {
			t.Fatal(err)
		}
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := f.fleet.Engine.Speedup; got != c.want {
			t.Errorf("%v: speedup %v, want %v", c.args, got, c.want)
		}
		if got := f.fleet.OracleFleet().Speedup; got != c.want {
			t.Errorf("%v: the oracles assume speedup %v, want %v", c.args, got, c.want)
		}
	}
	var f sweepFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.register(fs)
	if f.fleet.Engine.Speedup != bench.DefaultSpeedup {
		t.Errorf("load's fleet flags: speedup %v", f.fleet.Engine.Speedup)
	}
}

// The b2b preset is llm-d's shape on llm-d's pods; flags still win.
func TestB2BPreset(t *testing.T) {
	var f sweepFlags
	args := []string{"--qps", "30", "--repeats", "5", "--speedup", "2"}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	if err := f.registerPreset(fs, args, mockengine.PresetH100Llama3_8B); err != nil {
		t.Fatal(err)
	}
	if err := b2bPreset(&f); err != nil {
		t.Fatal(err)
	}
	sp := f.workload.SharedPrefix
	if sp.Groups != 150 || sp.PromptsPerGroup != 5 || sp.SystemTokens != 6000 || sp.QuestionTokens != 1200 || f.qps != "15,30,60" {
		t.Fatalf("shape %+v at %s", sp, f.qps)
	}
	// The contexts and questions fill 73% of the fleet's cache, as in the post.
	demand := float64(sp.Groups*sp.SystemTokens + sp.Groups*sp.PromptsPerGroup*sp.QuestionTokens)
	fleet := float64(f.fleet.Workers * f.fleet.Engine.TotalKVBlocks * f.fleet.BlockSize)
	if share := demand / fleet; math.Abs(share-0.73) > 0.005 {
		t.Fatalf("cache demand %.3f of the fleet's cache, want 0.73", share)
	}
	if f.fleet.Engine.Speedup != 1 || f.repeats != 3 {
		t.Fatalf("speedup %v, repeats %d", f.fleet.Engine.Speedup, f.repeats)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if f.qps != "30" || f.repeats != 5 || f.fleet.Engine.Speedup != 2 || f.workload.SharedPrefix.Groups != 150 {
		t.Fatalf("after flags: qps %s repeats %d speedup %v", f.qps, f.repeats, f.fleet.Engine.Speedup)
	}
	if _, err := bench.ParsePolicies(f.policies); err != nil {
		t.Fatal(err)
	}
}

func TestRepeatsFlag(t *testing.T) {
	err, _, _ := runArgs(t, "run", "--repeats", "0", "--policies", "oracle", "--qps", "1", "--requests", "2", "--out", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "--repeats must be >= 1") {
		t.Fatalf("--repeats 0: %v", err)
	}
	var f sweepFlags
	f.register(flag.NewFlagSet("t", flag.ContinueOnError))
	if f.repeats != 3 {
		t.Fatalf("default repeats %d, want 3", f.repeats)
	}
}

// kvbench table prints every measured point of several reports, named by
// their directories, with medians and ranges; the oracle rows are left out.
func TestTableCommand(t *testing.T) {
	dir := t.TempDir()
	b := bench.Bounds{Timed: 0.8, TTFTFloorP90: 450}
	reps := map[string]*bench.Report{
		"b2b-seed1": {Workload: bench.WorkloadSharedPrefix, Seed: 1, Repeats: 3, Policies: []bench.Point{
			{Name: bench.PolicyKVRouter, QPS: 30, HitRate: 0.6, TTFTP90: 500, Runs: 3, Bounds: b,
				Range: &bench.Ranges{HitRate: bench.Span{Min: 0.5, Max: 0.72}, TTFTP90: bench.Span{Min: 480, Max: 900}}},
			{Name: bench.PolicyOracle, QPS: 30, HitRate: 0.9, Bounds: b},
		}},
		"mooncake-seed2": {Workload: bench.WorkloadMooncake, Seed: 2, Repeats: 1, Policies: []bench.Point{
			{Name: bench.PolicyRoundRobin, QPS: 12, HitRate: 0, TTFTP90: 6000, Bounds: b},
		}},
	}
	var paths []string
	for name, r := range reps {
		p, err := r.WriteJSON(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	slices.Sort(paths)
	err, stdout, _ := runArgs(t, append([]string{"table"}, paths...)...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(stdout, "\n")
	if !strings.Contains(lines[0], "p90_floor_ms") || !strings.Contains(lines[1], "b2b-seed1") ||
		!strings.Contains(lines[1], "0.600 [0.500-0.720]") || !strings.Contains(lines[1], "0.75 [0.62-0.90]") ||
		!strings.Contains(lines[1], "500 [480-900]") || !strings.Contains(lines[1], "450") ||
		!strings.Contains(lines[2], "mooncake-seed2") || strings.Contains(stdout, "oracle ") {
		t.Fatalf("table:\n%s", stdout)
	}
	if err, _, _ := runArgs(t, "table"); err == nil {
		t.Fatal("table with no reports")
	}
	if err, _, _ := runArgs(t, "table", filepath.Join(dir, "missing", "report.json")); err == nil {
		t.Fatal("table of a missing report")
	}
}
