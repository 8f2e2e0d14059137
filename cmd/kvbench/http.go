package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/replica"
)

// httpFlags are the flags of `kvbench http`.
type httpFlags struct {
	url          string
	adminURL     string
	routerArgs   string
	noSetup      bool
	keepWorkers  bool
	natsURL      string
	routerPID    int
	apiTokenFile string
	adminTokFile string
	eventsSubj   string
	workers      int
	workerIDBase uint64
	tokens       int
	prefixTokens int
	groups       int
	prompts      int
	blockSize    int
	busy         int
	busyTokens   int
	updateStates bool

	rate       float64
	rates      string
	findMax    bool
	maxRate    float64
	stepFactor float64
	refine     int

	duration, warmup, pause time.Duration
	maxInFlight             int
	timeout                 time.Duration
	sloP99                  time.Duration
	sloErrors, sloAchieved  float64
	apis                    string
	grpcAddr                string
	grpcConns               int
	atMaxFractions          string
	out                     string
	seed                    uint64
	logLevel                string
}

// httpPlan is what the flags ask for once checked: the fixed rates of a
// list (or the single --rate), or a search.
type httpPlan struct {
	rates  []float64
	search *bench.MaxSearch // a template: each API searches with a copy
	slo    bench.SLO
	apis   []string
	// fractions of each API's max sustained rate measured after its
	// search (--at-max-fractions).
	fractions []float64
}

func parseHTTPFlags(args []string, stderr io.Writer) (httpFlags, httpPlan, error) {
	var f httpFlags
	fs := flag.NewFlagSet("kvbench http", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: kvbench http [flags]

Open-loop load of routing decisions over HTTP: requests are scheduled at a
fixed rate and each one's latency runs from its scheduled send time to its
/route answer, so a slow answer cannot hide the requests queued behind it.
Without --url it starts a router in-process (kvrouter serve's defaults).

`)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.url, "url", "", "target an already running router (http://host:port) instead of starting one in-process")
	fs.StringVar(&f.adminURL, "admin-url", "", "where the /workers set-up calls go when the router serves its admin API on a separate listener (--admin-addr); default: the router's URL")
	fs.StringVar(&f.routerArgs, "router-args", "", "in-process router: extra `kvrouter serve` flags, space-separated (e.g. \"--indexer-shards 1\")")
	fs.BoolVar(&f.noSetup, "no-setup", false, "with --url: register no workers, publish no KV events, start no busy requests (use the fleet the router has)")
	fs.BoolVar(&f.keepWorkers, "keep-workers", false, "with --url: leave the registered workers and their prefixes in the router at the end")
	fs.StringVar(&f.natsURL, "nats-url", "", "with --url: the NATS server the router reads KV events from; the prefixes are published there (without it every worker scores zero overlap)")
	fs.IntVar(&f.routerPID, "router-pid", 0, "with --url: pid of the router process on this machine; its CPU per decision is reported (steadier than latency on a shared machine)")
	fs.StringVar(&f.apiTokenFile, "api-token-file", "", "a router that requires bearer tokens: file whose first token (one per line, # comments) is sent with /route and /free")
	fs.StringVar(&f.adminTokFile, "admin-token-file", "", "a router that requires bearer tokens: file whose first token is sent with the /workers set-up calls (default: the API token)")
	fs.StringVar(&f.eventsSubj, "kv-events-subject", "kvrouter.kv_events", "with --url: the router's KV-event subject")
	fs.IntVar(&f.workers, "workers", 64, "workers registered over POST /workers (static: /route never contacts them)")
	fs.Uint64Var(&f.workerIDBase, "worker-id-base", 0, "worker ids are base+1 .. base+workers (pick a range a real fleet does not use)")
	fs.IntVar(&f.tokens, "tokens", 4096, "tokens per /route prompt")
	fs.IntVar(&f.prefixTokens, "prefix-tokens", 2048, "tokens of each group's shared system prompt that starts every prompt; each worker holds one group's (0 = no shared prefix)")
	fs.IntVar(&f.groups, "groups", 8, "system-prompt groups (the i-th worker, from 0, holds group i mod groups; prompt p starts with group p mod groups)")
	fs.IntVar(&f.prompts, "prompts", 64, "distinct prompts, sent in turn")
	fs.IntVar(&f.blockSize, "block-size", 16, "KV block size; must be the router's (in-process: passed to it)")
	fs.IntVar(&f.busy, "busy-per-worker", 4, "requests per worker routed with update_states before the load and kept in flight, so every rank reports load (as BenchmarkScheduleActor)")
	fs.IntVar(&f.busyTokens, "busy-tokens", 1024, "tokens of each busy request")
	fs.BoolVar(&f.updateStates, "update-states", true, "each decision is /route with update_states=true then /free; false = query-only /route (update_states=false)")
	fs.Float64Var(&f.rate, "rate", 2000, "offered decisions/s (the start rate with --find-max)")
	fs.StringVar(&f.rates, "rates", "", "comma-separated offered rates measured in turn (e.g. 2000,4000,8000); overrides --rate")
	fs.BoolVar(&f.findMax, "find-max", false, "raise the rate from --rate by --step-factor while steps meet the SLO, then bisect --refine times")
	fs.Float64Var(&f.maxRate, "max-rate", 200000, "--find-max: highest rate tried")
	fs.Float64Var(&f.stepFactor, "step-factor", 1.5, "--find-max: rate multiplier between steps")
	fs.IntVar(&f.refine, "refine", 2, "--find-max: bisection steps between the last passing and the first failing rate")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "measured time per rate")
	fs.DurationVar(&f.warmup, "warmup", 2*time.Second, "load at the same rate before each measurement, discarded")
	fs.DurationVar(&f.pause, "pause", time.Second, "idle time between rates")
	fs.IntVar(&f.maxInFlight, "max-inflight", 64, "requests outstanding at once, one keep-alive connection each; a request due when all are busy waits for a free one (counted as late; its latency still runs from its scheduled time)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "longest a single HTTP call may take (then counted as a timeout), and longest a late request waits for a connection (then counted as expired)")
	fs.DurationVar(&f.sloP99, "slo-p99", 10*time.Millisecond, "a rate is sustained when p99 latency is at most this (0 = no bound) ...")
	fs.Float64Var(&f.sloErrors, "slo-errors", 0.001, "... at most this fraction of scheduled requests failed (dropped included) ...")
	fs.Float64Var(&f.sloAchieved, "slo-achieved", 0.95, "... and achieved decisions/s are at least this fraction of the offered rate")
	fs.StringVar(&f.apis, "apis", "json", "comma-separated APIs measured in turn against the same router and fleet: json (POST /route, /free), grpc (unary Route, Free of kvrouter.v1), grpc-stream (Route, Free over Lifecycle streams)")
	fs.StringVar(&f.grpcAddr, "grpc-addr", "", "with --url and a gRPC API: the router's --grpc-addr (host:port); the in-process router serves gRPC on a random loopback port")
	fs.IntVar(&f.grpcConns, "grpc-conns", 4, "gRPC APIs: connections the --max-inflight senders share (grpc-stream: one Lifecycle stream each)")
	fs.StringVar(&f.atMaxFractions, "at-max-fractions", "", "with --find-max: after each API's search, measure at these fractions of its max sustained rate (e.g. 0.5,0.9)")
	fs.StringVar(&f.out, "out", "", "write the report as JSON to this file")
	fs.Uint64Var(&f.seed, "seed", 1, "prompt seed")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log level of the in-process router and the harness")
	if err := fs.Parse(args); err != nil {
		return f, httpPlan{}, err
	}
	if fs.NArg() > 0 {
		return f, httpPlan{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	plan, err := f.check(set)
	return f, plan, err
}

// check validates the flags (set names those given on the command line)
// and turns them into a plan.
func (f *httpFlags) check(set map[string]bool) (httpPlan, error) {
	plan := httpPlan{slo: bench.SLO{MaxP99: f.sloP99, MaxErrorRate: f.sloErrors, MinAchieved: f.sloAchieved}}
	if err := plan.slo.Validate(); err != nil {
		return plan, fmt.Errorf("--slo-*: %w", err)
	}
	if f.url != "" {
		if _, err := bench.ParseTargetURL(f.url); err != nil {
			return plan, fmt.Errorf("--url: %w", err)
		}
		if f.routerArgs != "" {
			return plan, errors.New("--router-args configures the in-process router; with --url, configure the running router instead")
		}
	} else {
		for _, name := range []string{"no-setup", "keep-workers", "nats-url", "kv-events-subject", "router-pid"} {
			if set[name] {
				return plan, fmt.Errorf("--%s applies to --url only (the in-process router is set up by the harness)", name)
			}
		}
	}
	apis, err := bench.ParseAPIs(f.apis)
	if err != nil {
		return plan, fmt.Errorf("--apis: %w", err)
	}
	plan.apis = apis
	if f.url != "" && bench.UsesGRPC(apis) && f.grpcAddr == "" {
		return plan, errors.New("--apis with a gRPC API and --url need --grpc-addr (the router's gRPC listener)")
	}
	if f.url == "" && set["grpc-addr"] {
		return plan, errors.New("--grpc-addr applies to --url only (the in-process router serves gRPC on a random port)")
	}
	if f.grpcConns < 1 {
		return plan, fmt.Errorf("--grpc-conns must be at least 1, got %d", f.grpcConns)
	}
	if f.atMaxFractions != "" {
		if !f.findMax {
			return plan, errors.New("--at-max-fractions needs --find-max (the fractions are of the max it finds)")
		}
		for _, part := range strings.Split(f.atMaxFractions, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
			if err != nil || !(v > 0 && v <= 1) {
				return plan, fmt.Errorf("--at-max-fractions: %q is not a fraction in (0, 1]", part)
			}
			plan.fractions = append(plan.fractions, v)
		}
	}
	if f.noSetup && set["nats-url"] {
		return plan, errors.New("--no-setup publishes no KV events: drop --nats-url or --no-setup")
	}
	if err := (bench.OpenLoopConfig{Rate: 1, Duration: f.duration, Warmup: f.warmup, MaxInFlight: f.maxInFlight}).Validate(); err != nil {
		return plan, fmt.Errorf("--duration, --warmup, --max-inflight: %w", err)
	}
	if f.adminURL != "" {
		if _, err := bench.ParseTargetURL(f.adminURL); err != nil {
			return plan, fmt.Errorf("--admin-url: %w", err)
		}
	}
	if f.routerPID < 0 {
		return plan, fmt.Errorf("--router-pid must be a process id, got %d", f.routerPID)
	}
	if f.pause < 0 {
		return plan, fmt.Errorf("--pause must not be negative, got %v", f.pause)
	}
	if err := f.loadConfig("http://127.0.0.1:1", f.blockSize).Validate(); err != nil {
		return plan, err
	}
	if !(f.rate > 0) || math.IsInf(f.rate, 0) {
		return plan, fmt.Errorf("--rate must be a positive number of decisions/s, got %v", f.rate)
	}
	switch {
	case f.findMax && set["rates"]:
		return plan, errors.New("--find-max and --rates exclude each other: a search picks its own rates")
	case f.findMax:
		plan.search = &bench.MaxSearch{Start: f.rate, Factor: f.stepFactor, Limit: f.maxRate, Refine: f.refine}
		if err := plan.search.Validate(); err != nil {
			return plan, fmt.Errorf("--find-max: %w", err)
		}
	case f.rates != "":
		rates, err := parseRates(f.rates)
		if err != nil {
			return plan, err
		}
		plan.rates = rates
	default:
		plan.rates = []float64{f.rate}
	}
	return plan, nil
}

// parseRates parses "2000,4000,8e3" into positive rates.
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		r, err := strconv.ParseFloat(part, 64)
		if err != nil || !(r > 0) || math.IsInf(r, 0) {
			return nil, fmt.Errorf("--rates: %q is not a positive number of decisions/s", part)
		}
		out = append(out, r)
	}
	return out, nil
}

// loadConfig is the harness's view of the flags against url.
func (f *httpFlags) loadConfig(url string, blockSize int) bench.RouteLoadConfig {
	return bench.RouteLoadConfig{
		URL: url, AdminURL: f.adminURL, Workers: f.workers, WorkerIDBase: f.workerIDBase, Tokens: f.tokens, PrefixTokens: f.prefixTokens,
		Groups: f.groups, Prompts: f.prompts, BlockSize: blockSize, BusyPerWorker: f.busy, BusyTokens: f.busyTokens,
		UpdateStates: f.updateStates, Timeout: f.timeout, Seed: f.seed, NoSetup: f.noSetup,
		NATSURL: f.natsURL, KVEventsSubject: f.eventsSubj, Cleanup: f.url != "" && !f.keepWorkers,
		GRPCAddr: f.grpcAddr, GRPCConns: f.grpcConns,
	}
}

func runHTTP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, plan, err := parseHTTPFlags(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return err
	}
	rep := bench.RouteBenchReport{
		Command: strings.Join(append([]string{"kvbench", "http"}, args...), " "),
		Workers: f.workers, Tokens: f.tokens, MaxInFlight: f.maxInFlight, WarmupS: f.warmup.Seconds(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(),
		Started: time.Now().UTC(), SLO: plan.slo,
	}
	cfg := f.loadConfig(f.url, f.blockSize)
	cfg.Logger = log
	if cfg.APIToken, err = readTokenFile(f.apiTokenFile); err != nil {
		return fmt.Errorf("--api-token-file: %w", err)
	}
	if cfg.AdminToken, err = readTokenFile(f.adminTokFile); err != nil {
		return fmt.Errorf("--admin-token-file: %w", err)
	}
	if f.url == "" {
		r, serveCfg, stop, err := startInProcessRouter(ctx, f, log, bench.UsesGRPC(plan.apis))
		if err != nil {
			return err
		}
		defer stop()
		cfg.URL, cfg.NATSURL, cfg.KVEventsSubject, cfg.BlockSize = "http://"+r.HTTPAddr(), r.NATSURL(), serveCfg.KVEventsSubject, serveCfg.BlockSize
		cfg.GRPCAddr = r.GRPCAddr()
		rep.Target = "in-process router (kvrouter serve defaults, --jetstream=false"
		if f.routerArgs != "" {
			rep.Target += ", " + f.routerArgs
		}
		rep.Target += ")"
	} else {
		rep.Target = "running router at " + f.url
	}
	target, err := bench.PrepareRouteTarget(ctx, cfg)
	if err != nil {
		return fmt.Errorf("set up %s: %w", cfg.URL, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := target.Close(cctx); err != nil {
			fmt.Fprintln(stderr, "kvbench http: clean-up:", err)
		}
	}()
	rep.Setup = target.Setup
	describeHTTPRun(stdout, f, cfg, &rep, plan)
	if err := runHTTPSteps(ctx, stdout, f, plan, target, &rep); err != nil {
		return err
	}
	if f.out != "" {
		if err := writeJSONFile(f.out, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report: %s\n", f.out)
	}
	return nil
}

// startInProcessRouter starts a replica exactly as `kvrouter serve` would
// with its defaults, on loopback random ports with embedded NATS (no
// JetStream: the load does not touch it), plus --router-args.
func startInProcessRouter(ctx context.Context, f httpFlags, log *slog.Logger, grpc bool) (*replica.Replica, config.Config, func(), error) {
	dir, err := os.MkdirTemp("", "kvbench-http-")
	if err != nil {
		return nil, config.Config{}, nil, err
	}
	args := []string{"--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--jetstream=false", "--data-dir", dir,
		"--replica-id", "kvbench-http", "--log-level", f.logLevel, "--block-size", strconv.Itoa(f.blockSize)}
	if grpc {
		args = append(args, "--grpc-addr", "127.0.0.1:0")
	}
	args = append(args, strings.Fields(f.routerArgs)...)
	cfg, err := config.Load(args, func(string) string { return "" })
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, cfg, nil, fmt.Errorf("--router-args: %w", err)
	}
	// As replica.Serve does for the binary.
	if _, err := replica.TuneRuntime(cfg, os.Getenv, log); err != nil {
		_ = os.RemoveAll(dir)
		return nil, cfg, nil, err
	}
	r, err := replica.Start(ctx, cfg, log.With("component", "router"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, cfg, nil, fmt.Errorf("start in-process router: %w", err)
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = r.Shutdown(sctx)
		_ = os.RemoveAll(dir)
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.Ready() != nil {
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return nil, cfg, nil, fmt.Errorf("in-process router not ready: %v", r.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r, cfg, stop, nil
}

// describeHTTPRun prints (and records in rep) what is measured and how.
func describeHTTPRun(w io.Writer, f httpFlags, cfg bench.RouteLoadConfig, rep *bench.RouteBenchReport, plan httpPlan) {
	s := rep.Setup
	if f.updateStates {
		rep.Decision = "POST /route with update_states=true, then POST /free of the request on the same connection (state updates included)"
	} else {
		rep.Decision = "POST /route with update_states=false (query only: no state update, no /free)"
	}
	rep.Latency = fmt.Sprintf("open loop at a fixed rate: from each request's scheduled send time to its /route answer (coordinated-omission-safe); "+
		"at most %d requests in flight, one keep-alive connection each; a request due when all are busy waits for the next free one "+
		"(counted as late, its wait included) and fails as expired past --timeout %v", f.maxInFlight, f.timeout)
	switch {
	case f.noSetup:
		rep.Prefix = "none set up (--no-setup): the router's own fleet"
	case s.EventsSent:
		rep.Prefix = fmt.Sprintf("%d groups of %d-token system prompts, one per worker, published as KV events (each worker indexes %d blocks)",
			f.groups, f.prefixTokens, s.IndexedBlocks)
	default:
		rep.Prefix = "no KV events published (no --nats-url or --prefix-tokens 0): every worker scores zero overlap"
	}
	fmt.Fprintf(w, "kvbench http: %s, GOMAXPROCS %d\n", rep.Target, rep.GOMAXPROCS)
	if !f.noSetup {
		fmt.Fprintf(w, "fleet:    %d workers registered over POST /workers; %s; %d busy requests (%d per worker, %d tokens) in flight\n",
			s.Registered, rep.Prefix, s.BusyRequests, f.busy, f.busyTokens)
	} else {
		fmt.Fprintf(w, "fleet:    %s\n", rep.Prefix)
	}
	fmt.Fprintf(w, "decision: %s\n", rep.Decision)
	fmt.Fprintf(w, "          %d-token prompts (%d distinct, %.1f kB bodies); a sample decision overlapped %d of %d blocks\n",
		cfg.Tokens, cfg.Prompts, float64(s.RequestBodyLen)/1000, s.SampleOverlap, s.PromptBlocks)
	fmt.Fprintf(w, "latency:  %s\n", rep.Latency)
	slo := fmt.Sprintf("errors <= %.2f%%, achieved >= %.0f%% of offered", 100*plan.slo.MaxErrorRate, 100*plan.slo.MinAchieved)
	if plan.slo.MaxP99 > 0 {
		slo = "p99 <= " + plan.slo.MaxP99.String() + ", " + slo
	}
	fmt.Fprintf(w, "steps:    %v warm-up then %v measured per rate; SLO: %s\n\n", f.warmup, f.duration, slo)
}

// next is the i-th rate to measure (false: done): the list's, or the
// search's next.
func (p httpPlan) next(i int) (float64, bool) {
	if p.search != nil {
		return p.search.Next()
	}
	if i < len(p.rates) {
		return p.rates[i], true
	}
	return 0, false
}

// runHTTPSteps measures each API in turn: the plan's rates (a search
// starts afresh per API), then the fractions of the API's max.
func runHTTPSteps(ctx context.Context, w io.Writer, f httpFlags, plan httpPlan, target *bench.RouteTarget, rep *bench.RouteBenchReport) error {
	rep.APIs = plan.apis
	for i, api := range plan.apis {
		if len(plan.apis) > 1 {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "API %s (%s)\n", api, apiDescription(api, f))
		}
		p := plan
		if plan.search != nil {
			s := *plan.search
			p.search = &s
		}
		best, err := runAPISteps(ctx, w, f, p, target, rep, api)
		if err != nil {
			return err
		}
		if rep.MaxSustainedByAPI == nil {
			rep.MaxSustainedByAPI = map[string]float64{}
		}
		rep.MaxSustainedByAPI[api] = best
		if best > 0 && len(plan.fractions) > 0 {
			fmt.Fprintf(w, "at fractions of %s's max sustained rate (%.0f/s):\n", api, best)
			for _, frac := range plan.fractions {
				if err := pause(ctx, f.pause); err != nil {
					return err
				}
				st, err := measureHTTPStep(ctx, f, target, best*frac, api)
				if err != nil {
					return err
				}
				st.Pass, st.Why = plan.slo.Judge(st)
				st.Phase = fmt.Sprintf("%.0f%% of max", 100*frac)
				rep.Steps = append(rep.Steps, st)
				bench.WriteRouteStep(w, st)
			}
		}
	}
	if len(plan.apis) > 1 {
		writeAPISummary(w, rep, plan)
	}
	return nil
}

func apiDescription(api string, f httpFlags) string {
	switch api {
	case bench.APIGRPC:
		return fmt.Sprintf("unary kvrouter.v1 Route then Free, %d senders over %d connections", f.maxInFlight, f.grpcConns)
	case bench.APIGRPCStream:
		return fmt.Sprintf("Route then Free over %d Lifecycle streams (one per connection), %d senders", f.grpcConns, f.maxInFlight)
	}
	return fmt.Sprintf("POST /route then /free, %d keep-alive connections", f.maxInFlight)
}

// writeAPISummary prints each API's max and its latency at the fractions.
func writeAPISummary(w io.Writer, rep *bench.RouteBenchReport, plan httpPlan) {
	fmt.Fprintf(w, "\nsummary (decisions/s with the plan's state updates; latency from scheduled send to the route answer):\n")
	fmt.Fprintf(w, "%-12s %12s", "api", "max/s")
	for _, frac := range plan.fractions {
		fmt.Fprintf(w, "  %28s", fmt.Sprintf("p50/p99/p99.9 at %.0f%%", 100*frac))
	}
	fmt.Fprintln(w)
	for _, api := range plan.apis {
		fmt.Fprintf(w, "%-12s %12.0f", api, rep.MaxSustainedByAPI[api])
		for _, frac := range plan.fractions {
			cell := "-"
			phase := fmt.Sprintf("%.0f%% of max", 100*frac)
			for _, st := range rep.Steps {
				if st.API == api && st.Phase == phase {
					l := st.LatencyMs
					cell = fmtMs(l.P50) + "/" + fmtMs(l.P99) + "/" + fmtMs(l.P999)
				}
			}
			fmt.Fprintf(w, "  %28s", cell)
		}
		fmt.Fprintln(w)
	}
	if j := rep.MaxSustainedByAPI[bench.APIJSON]; j > 0 {
		for _, api := range plan.apis {
			if api != bench.APIJSON && rep.MaxSustainedByAPI[api] > 0 {
				fmt.Fprintf(w, "%s / json max: %.2fx\n", api, rep.MaxSustainedByAPI[api]/j)
			}
		}
	}
}

func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runAPISteps measures each rate of the plan through one API and prints
// it as it ends; it returns the highest rate that met the SLO.
func runAPISteps(ctx context.Context, w io.Writer, f httpFlags, plan httpPlan, target *bench.RouteTarget, rep *bench.RouteBenchReport, api string) (float64, error) {
	bench.WriteRouteStepHeader(w)
	best := 0.0
	n := 0
	for i := 0; ; i++ {
		rate, ok := plan.next(i)
		if !ok {
			break
		}
		if i > 0 {
			if err := pause(ctx, f.pause); err != nil {
				return 0, err
			}
		}
		st, err := measureHTTPStep(ctx, f, target, rate, api)
		if err != nil {
			return 0, err
		}
		st.Pass, st.Why = plan.slo.Judge(st)
		if st.Pass {
			best = max(best, rate)
		}
		if plan.search != nil {
			plan.search.Record(rate, st.Pass)
		}
		rep.Steps = append(rep.Steps, st)
		n++
		bench.WriteRouteStep(w, st)
		if st.SendLagMs.P99 > 1 { // ms
			fmt.Fprintf(w, "%9s note: requests left late (send lag p50 %s, p99 %s: the generator or every connection was busy); the latency includes it\n",
				"", fmtMs(st.SendLagMs.P50), fmtMs(st.SendLagMs.P99))
		}
	}
	if n > 1 {
		rep.MaxSustained = max(rep.MaxSustained, best)
		if best > 0 {
			fmt.Fprintf(w, "\nmax sustained: %.0f decisions/s (the highest offered rate that met the SLO)\n", best)
		} else {
			fmt.Fprintln(w, "\nmax sustained: none of the rates met the SLO")
		}
	}
	return best, nil
}

// measureHTTPStep runs one rate and adds the CPU the kvbench process and,
// with --router-pid, the router used meanwhile.
func measureHTTPStep(ctx context.Context, f httpFlags, target *bench.RouteTarget, rate float64, api string) (bench.RouteStep, error) {
	cpu0, wall0 := selfCPU(), time.Now()
	router0, err := routerCPU(f.routerPID)
	if err != nil {
		return bench.RouteStep{}, err
	}
	res, err := target.RunAPI(ctx, bench.OpenLoopConfig{Rate: rate, Warmup: f.warmup, Duration: f.duration, MaxInFlight: f.maxInFlight, Timeout: f.timeout}, api)
	if err != nil {
		return bench.RouteStep{}, err
	}
	router1, err := routerCPU(f.routerPID)
	if err != nil {
		return bench.RouteStep{}, err
	}
	wall := time.Since(wall0).Seconds()
	st := bench.NewRouteStep(res)
	st.API = api
	st.ProcessCores = (selfCPU() - cpu0).Seconds() / wall
	if f.routerPID > 0 && res.AllSent > 0 {
		st.RouterCPUPerDecision = float64((router1 - router0).Microseconds()) / float64(res.AllSent)
		st.RouterCores = (router1 - router0).Seconds() / wall
	}
	if st.Failed > 0 {
		st.FirstError = target.FirstError()
	}
	return st, nil
}

// readTokenFile returns the first token of a token file: its first line
// that is neither blank nor a # comment ("" for no path).
func readTokenFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", fmt.Errorf("%s holds no token", path)
}

// routerCPU is the CPU time the router process used so far (0 without
// a pid).
func routerCPU(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, nil
	}
	d, err := bench.ProcessCPUTime(pid)
	if err != nil {
		return 0, fmt.Errorf("--router-pid: %w", err)
	}
	return d, nil
}

func fmtMs(ms float64) string { return strconv.FormatFloat(ms, 'f', 2, 64) + "ms" }

func writeJSONFile(path string, v any) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
