package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench"
)

func TestParseHTTPFlagsRejects(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "0"}, "--rate must be a positive number"},
		{[]string{"--rate", "-5"}, "--rate must be a positive number"},
		{[]string{"--rate", "lots"}, `invalid value "lots" for flag -rate`},
		{[]string{"--rates", "1000,abc"}, `--rates: "abc" is not a positive number`},
		{[]string{"--rates", "1000,,2000"}, `--rates: "" is not a positive number`},
		{[]string{"--rates", "1000", "--find-max"}, "--find-max and --rates exclude each other"},
		{[]string{"--find-max", "--step-factor", "1"}, "step factor must be greater than 1"},
		{[]string{"--find-max", "--rate", "5000", "--max-rate", "1000"}, "rate limit must be at least the start rate"},
		{[]string{"--find-max", "--refine", "-1"}, "refinement steps must not be negative"},
		{[]string{"--url", "https://127.0.0.1:8080"}, "https is not supported"},
		{[]string{"--url", "127.0.0.1:8080"}, "want http://host:port"},
		{[]string{"--admin-url", "https://127.0.0.1:9090"}, "--admin-url: target URL"},
		{[]string{"--url", "http://127.0.0.1:8080/route"}, "base URL only"},
		{[]string{"--url", "http://127.0.0.1:8080", "--router-args", "--pprof"}, "--router-args configures the in-process router"},
		{[]string{"--no-setup"}, "--no-setup applies to --url only"},
		{[]string{"--nats-url", "nats://127.0.0.1:4222"}, "--nats-url applies to --url only"},
		{[]string{"--keep-workers"}, "--keep-workers applies to --url only"},
		{[]string{"--router-pid", "1"}, "--router-pid applies to --url only"},
		{[]string{"--url", "http://h:1", "--router-pid", "-3"}, "--router-pid must be a process id"},
		{[]string{"--url", "http://h:1", "--no-setup", "--nats-url", "nats://h:4222"}, "--no-setup publishes no KV events"},
		{[]string{"--duration", "0s"}, "duration must be positive"},
		{[]string{"--warmup", "-1s"}, "warmup must not be negative"},
		{[]string{"--max-inflight", "0"}, "max in flight must be at least 1"},
		{[]string{"--timeout", "0s"}, "timeout must be positive"},
		{[]string{"--pause", "-1s"}, "--pause must not be negative"},
		{[]string{"--workers", "0"}, "workers must be at least 1"},
		{[]string{"--tokens", "1024", "--prefix-tokens", "2048"}, "prefix tokens must be in 0..tokens (1024), got 2048"},
		{[]string{"--prefix-tokens", "8"}, "at least one block"},
		{[]string{"--groups", "0"}, "groups must be at least 1"},
		{[]string{"--block-size", "0"}, "block size must be at least 1"},
		{[]string{"--busy-per-worker", "-1"}, "busy requests per worker must not be negative"},
		{[]string{"--slo-errors", "2"}, "error-rate bound must be in 0..1"},
		{[]string{"--slo-achieved", "-0.5"}, "achieved-ratio bound must be in 0..1"},
		{[]string{"--slo-p99", "-1ms"}, "p99 bound must not be negative"},
		{[]string{"stray"}, "unexpected arguments: [stray]"},
	} {
		var stderr strings.Builder
		_, _, err := parseHTTPFlags(c.args, &stderr)
		if err == nil {
			t.Errorf("%v: accepted", c.args)
			continue
		}
		if !strings.Contains(err.Error(), c.want) && !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: error %q, want it to mention %q", c.args, err, c.want)
		}
	}
}

func TestParseHTTPFlagsPlans(t *testing.T) {
	f, plan, err := parseHTTPFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// The defaults are the README's setup: 64 workers, 4k-token prompts
	// sharing 8 groups of 2k-token prefixes, state updates on.
	if f.workers != 64 || f.tokens != 4096 || f.prefixTokens != 2048 || f.groups != 8 || !f.updateStates || f.url != "" {
		t.Errorf("defaults %+v", f)
	}
	if !slices.Equal(plan.rates, []float64{2000}) || plan.search != nil {
		t.Errorf("default plan: rates %v search %v, want the single --rate", plan.rates, plan.search)
	}
	_, plan, err = parseHTTPFlags([]string{"--rates", " 1000, 2.5e3 ,8000"}, io.Discard)
	if err != nil || !slices.Equal(plan.rates, []float64{1000, 2500, 8000}) {
		t.Errorf("--rates: %v %v", plan.rates, err)
	}
	_, plan, err = parseHTTPFlags([]string{"--find-max", "--rate", "500", "--step-factor", "2", "--max-rate", "4000", "--refine", "1"}, io.Discard)
	if err != nil || plan.search == nil || plan.search.Start != 500 || plan.search.Factor != 2 || plan.search.Limit != 4000 || plan.search.Refine != 1 {
		t.Fatalf("--find-max: %+v %v", plan.search, err)
	}
	f, _, err = parseHTTPFlags([]string{"--url", "http://127.0.0.1:8080", "--update-states=false", "--no-setup"}, io.Discard)
	if err != nil || f.updateStates || !f.noSetup {
		t.Errorf("--url --update-states=false --no-setup: %+v %v", f, err)
	}
	cfg := f.loadConfig(f.url, f.blockSize)
	if !cfg.Cleanup || !cfg.NoSetup || cfg.UpdateStates {
		t.Errorf("load config %+v: want clean-up (--url without --keep-workers), no setup, query only", cfg)
	}
	f, _, _ = parseHTTPFlags([]string{"--url", "http://127.0.0.1:8080", "--keep-workers"}, io.Discard)
	if f.loadConfig(f.url, 16).Cleanup {
		t.Error("--keep-workers still cleans up")
	}
}

// TestHTTPInProcess runs a short load against the in-process router and
// checks the report: the fleet was set up (overlap non-trivial) and every
// scheduled decision is accounted for.
func TestHTTPInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a router")
	}
	out := filepath.Join(t.TempDir(), "http.json")
	err, stdout, stderr := runArgs(t, "http", "--workers", "4", "--busy-per-worker", "1", "--rate", "200", "--duration", "200ms",
		"--warmup", "0s", "--timeout", "10s", "--out", out)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"in-process router", "update_states=true, then POST /free", "from each request's scheduled send time", "offered/s", "report: " + out} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	rep := readReport(t, out)
	if len(rep.Steps) != 1 {
		t.Fatalf("%d steps, want 1", len(rep.Steps))
	}
	st := rep.Steps[0]
	if st.Scheduled != 40 || st.OK+st.Failed != st.Scheduled || st.OK == 0 || st.OfferedRate != 200 {
		t.Errorf("step %+v: want 40 scheduled, all accounted for", st)
	}
	// Each worker holds a 2,048-token prefix: 128 blocks of 16; the sample
	// prompt starts with one of them.
	s := rep.Setup
	if s.Registered != 4 || !s.EventsSent || s.IndexedBlocks != 128 || s.SampleOverlap != 128 || s.BusyRequests != 4 || s.PromptBlocks != 256 {
		t.Errorf("setup %+v", s)
	}
	if !strings.HasPrefix(rep.Command, "kvbench http --workers 4") || rep.Decision == "" || rep.Latency == "" {
		t.Errorf("report header: %q %q %q", rep.Command, rep.Decision, rep.Latency)
	}
}

// TestHTTPAgainstRunningRouter uses --url and --nats-url as against a
// separately started `kvrouter serve`, query-only, over two rates, and
// checks the harness removes its workers afterwards.
func TestHTTPAgainstRunningRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a router")
	}
	f, _, err := parseHTTPFlags([]string{"--log-level", "error"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, _, stop, err := startInProcessRouter(ctx, f, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	url := "http://" + r.HTTPAddr()
	out := filepath.Join(t.TempDir(), "http.json")
	err, stdout, stderr := runArgs(t, "http", "--url", url, "--nats-url", r.NATSURL(), "--workers", "3", "--worker-id-base", "500",
		"--update-states=false", "--rates", "100,150", "--duration", "100ms", "--warmup", "0s", "--pause", "0s", "--out", out)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stdout, "running router at "+url) || !strings.Contains(stdout, "update_states=false (query only") {
		t.Errorf("output does not name the target and mode:\n%s", stdout)
	}
	rep := readReport(t, out)
	if len(rep.Steps) != 2 || rep.Steps[0].OfferedRate != 100 || rep.Steps[1].OfferedRate != 150 || rep.Setup.SampleOverlap != 128 {
		t.Errorf("report: %d steps, setup %+v", len(rep.Steps), rep.Setup)
	}
	for _, st := range rep.Steps {
		if st.OK+st.Failed != st.Scheduled || st.Scheduled == 0 {
			t.Errorf("step %+v: decisions unaccounted for", st)
		}
	}
	resp, err := http.Get(url + "/workers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Workers []struct {
			WorkerID uint64 `json:"worker_id"`
		} `json:"workers"`
		TrackedRequests uint64 `json:"tracked_requests"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if len(v.Workers) != 0 || v.TrackedRequests != 0 {
		t.Errorf("after the run the router still lists %d workers and tracks %d requests", len(v.Workers), v.TrackedRequests)
	}
}

func readReport(t *testing.T, path string) bench.RouteBenchReport {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.RouteBenchReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rep
}

func TestRouterCPU(t *testing.T) {
	if d, err := routerCPU(0); d != 0 || err != nil {
		t.Errorf("no pid: %v %v", d, err)
	}
	if _, err := routerCPU(1 << 30); err == nil || !strings.Contains(err.Error(), "--router-pid") {
		t.Errorf("a pid that does not exist: %v", err)
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokens")
	if err := os.WriteFile(good, []byte("# rotated 2026-11\n\n  first-token-0123456789  \nsecond-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := readTokenFile(good); err != nil || tok != "first-token-0123456789" {
		t.Errorf("token %q, %v", tok, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# nothing\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readTokenFile(empty); err == nil || !strings.Contains(err.Error(), "holds no token") {
		t.Errorf("empty file: %v", err)
	}
	if _, err := readTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file gave no error")
	}
	if tok, err := readTokenFile(""); tok != "" || err != nil {
		t.Errorf("no file: %q %v", tok, err)
	}
}
