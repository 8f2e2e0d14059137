package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/replica"
)

// replicaCommand is the hidden command kvbench re-executes itself with to
// run a router replica (exactly `kvrouter serve`), so `go run` needs no
// separately built binary.
const replicaCommand = "_replica"

func runReplica(ctx context.Context, args []string, stderr io.Writer) error {
	return replica.Serve(ctx, args, os.Getenv, stderr)
}

type scaleFlags struct {
	replicas        string
	cpuPerReplica   float64
	workers         int
	promptTokens    int
	prompts         int
	blockSize       int
	stride          int
	replicaArgs     string
	clientsPerRepl  int
	warmup, measure time.Duration
	out             string
	seed            uint64
	rounds          int
	loadReplicas    int
	interleave      time.Duration
	noGossip        bool
}

// runScale measures routing decisions/s of 1 vs N replica processes, each
// capped to the same CPU share, under a closed-loop /route load.
func runScale(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, counts, err := parseScaleFlags(args, stderr)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	static := scaleStaticWorkers(f.workers)
	prompts := scalePrompts(f.seed, f.prompts, f.promptTokens)
	writeScaleHeader(stdout, f)
	var clusters map[int]*bench.ProcessCluster
	if f.interleave > 0 {
		// Every cluster stays up and the load alternates between them in
		// short windows, so the machine's drift over tens of seconds hits
		// both sides of each round's ratio alike.
		clusters, err = startScaleClusters(ctx, f, exe, static, counts)
		defer stopScaleClusters(clusters)
		if err != nil {
			return err
		}
	}
	sum := newScaleSummary()
	for round := 1; round <= max(f.rounds, 1); round++ {
		results, errs := measureScaleRound(ctx, f, exe, static, prompts, counts, clusters)
		if err := sum.addRound(stdout, round, counts, results, errs); err != nil {
			return err
		}
	}
	sum.write(stdout, counts, max(f.rounds, 1))
	if clusters != nil {
		writeLifetimeDetector(ctx, stdout, counts, clusters)
	}
	return nil
}

// writeLifetimeDetector prints what each interleaved cluster's failure
// detector did over the whole run, windows of the other clusters included.
func writeLifetimeDetector(ctx context.Context, w io.Writer, counts []int, clusters map[int]*bench.ProcessCluster) {
	fmt.Fprintf(w, "\nfailure detector over the whole run (all replicas):\n")
	for _, n := range counts {
		d, err := bench.ScrapeDetector(ctx, clusters[n].URLs())
		if err != nil {
			fmt.Fprintf(w, "  %d replica(s): %v\n", n, err)
			continue
		}
		fmt.Fprintf(w, "  %d replica(s): %s\n", n, d)
	}
}

// register defines scale's flags on fs.
func (f *scaleFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.replicas, "replicas", "1,3,5", "comma-separated replica counts to compare, each with the first")
	fs.Float64Var(&f.cpuPerReplica, "cpu-per-replica", 0.2, "cores each replica process may use (its own cgroup CPU quota; five replicas and the load generator fit in two cores at 0.2); 0 = no cap")
	fs.IntVar(&f.workers, "workers", 16, "workers registered (static; /route never contacts them)")
	fs.IntVar(&f.promptTokens, "prompt-tokens", 4096, "tokens per prompt")
	fs.IntVar(&f.prompts, "prompts", 64, "distinct prompts, used in turn")
	fs.IntVar(&f.blockSize, "block-size", 16, "KV block size")
	fs.IntVar(&f.stride, "router-active-sequence-stride", config.DefaultActiveSequenceStride, "the replicas' router-active-sequence-stride (hashes per gossiped add: prompt blocks / stride)")
	fs.IntVar(&f.clientsPerRepl, "clients-per-replica", 4, "closed-loop clients per replica")
	fs.DurationVar(&f.warmup, "warmup", 3*time.Second, "load before measuring")
	fs.DurationVar(&f.measure, "duration", 10*time.Second, "measured window per replica count")
	fs.StringVar(&f.replicaArgs, "replica-args", "", "extra `kvrouter serve` flags for every replica, space-separated (e.g. \"--pprof\")")
	fs.StringVar(&f.out, "out", "out/scale", "directory for the replicas' logs")
	fs.Uint64Var(&f.seed, "seed", 1, "prompt seed")
	fs.IntVar(&f.loadReplicas, "load-replicas", 0, "send the load to only the first K replicas (0 = all): with 1, the others' CPU is the pure cost of applying its gossip")
	fs.DurationVar(&f.interleave, "interleave", 0, "keep every cluster up and alternate the load between them in windows this long (each after 1 s of warm-up), one window per count per round; 0 = a fresh cluster per measurement")
	fs.BoolVar(&f.noGossip, "no-gossip", false, "run the replicas independently (no memberlist, no shared load view): the baseline that shows what the machine itself, not gossip, costs when N replicas share it")
	fs.IntVar(&f.rounds, "rounds", 3, "rounds; each measures every replica count in turn, and the summary takes medians (a shared VM is noisy)")
}

// parseScaleFlags parses scale's arguments and its replica counts.
func parseScaleFlags(args []string, stderr io.Writer) (scaleFlags, []int, error) {
	var f scaleFlags
	fs := flag.NewFlagSet("kvbench scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return f, nil, err
	}
	counts, err := parseCounts(f.replicas)
	if err != nil {
		return f, nil, err
	}
	return f, counts, nil
}

// scaleStaticWorkers are the --static-workers specs of n workers; their
// URLs are never contacted (/route only decides).
func scaleStaticWorkers(n int) []string {
	static := make([]string, n)
	for i := range static {
		static[i] = fmt.Sprintf("%d=http://127.0.0.1:%d", i+1, 1+i)
	}
	return static
}

// scalePrompts are n random prompts of tokens token ids each.
func scalePrompts(seed uint64, n, tokens int) [][]uint32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	prompts := make([][]uint32, n)
	for i := range prompts {
		prompts[i] = make([]uint32, tokens)
		for j := range prompts[i] {
			prompts[i][j] = rng.Uint32N(32000)
		}
	}
	return prompts
}

func writeScaleHeader(w io.Writer, f scaleFlags) {
	fmt.Fprintf(w, "routing decisions (route + prefill_done + free over HTTP), %d-token prompts, %d workers, %v cores per replica, stride %d\n\n",
		f.promptTokens, f.workers, capText(f.cpuPerReplica), f.stride)
	fmt.Fprintf(w, "%-6s %-9s %12s %10s %10s %8s %16s %14s %14s\n", "round", "replicas", "decisions/s", "route p50", "route p99", "errors", "cpu-µs/decision", "client cores", "susp/ref/dead")
}

// startScaleClusters starts one cluster per count for --interleave. On
// error the clusters already started are returned too, for stopping.
func startScaleClusters(ctx context.Context, f scaleFlags, exe string, static []string, counts []int) (map[int]*bench.ProcessCluster, error) {
	clusters := make(map[int]*bench.ProcessCluster)
	for _, n := range counts {
		c, err := startScaleCluster(ctx, f, exe, static, n)
		if err != nil {
			return clusters, fmt.Errorf("%d replicas: %w", n, err)
		}
		clusters[n] = c
	}
	return clusters, nil
}

func stopScaleClusters(clusters map[int]*bench.ProcessCluster) {
	for _, c := range clusters {
		stopScaleCluster(c)
	}
}

// measureScaleRound measures every count once: in its window of the
// running clusters with --interleave, else on a fresh cluster each.
func measureScaleRound(ctx context.Context, f scaleFlags, exe string, static []string, prompts [][]uint32, counts []int, clusters map[int]*bench.ProcessCluster) ([]scaleResult, []error) {
	results := make([]scaleResult, len(counts))
	errs := make([]error, len(counts))
	for i, n := range counts {
		if clusters != nil {
			results[i], errs[i] = measureScale(ctx, f, clusters[n], prompts, time.Second, f.interleave)
		} else {
			results[i], errs[i] = scalePoint(ctx, f, exe, static, prompts, n)
		}
	}
	return results, errs
}

// scaleSummary collects every round's figures for the medians.
type scaleSummary struct {
	perSec map[int][]float64
	cpu    map[int][]float64
	ratios map[int][]float64 // each count's decisions/s over the first's, per round
	// detector sums what the failure detectors did during each count's
	// windows (all replicas).
	detector map[int]bench.DetectorCounts
}

func newScaleSummary() scaleSummary {
	return scaleSummary{perSec: make(map[int][]float64), cpu: make(map[int][]float64),
		ratios: make(map[int][]float64), detector: make(map[int]bench.DetectorCounts)}
}

// addRound prints a round's rows and records them; a failed measurement
// or a failed decision ends the run.
func (s *scaleSummary) addRound(w io.Writer, round int, counts []int, results []scaleResult, errs []error) error {
	var base float64
	for i, n := range counts {
		res, err := results[i], errs[i]
		if err != nil {
			return fmt.Errorf("round %d, %d replicas: %w", round, n, err)
		}
		if res.load.Errors > 0 {
			return fmt.Errorf("round %d, %d replicas: %d failed decisions (first: %s)", round, n, res.load.Errors, res.load.FirstErr)
		}
		d := res.detector
		fmt.Fprintf(w, "%-6d %-9d %12.0f %10v %10v %8d %16.1f %14.2f %14s   per replica: %s\n", round, n, res.load.PerSec(),
			res.load.RouteP50.Round(time.Microsecond), res.load.RouteP99.Round(time.Microsecond), res.load.Errors,
			res.cpuPerDecision, res.clientCores, fmt.Sprintf("%d/%d/%d", d.Suspicions, d.Refutations, d.Deaths),
			formatFloats(res.perReplica))
		s.perSec[n] = append(s.perSec[n], res.load.PerSec())
		s.cpu[n] = append(s.cpu[n], res.cpuPerDecision)
		s.detector[n] = s.detector[n].Add(d)
		if i == 0 {
			base = res.load.PerSec()
		} else if base > 0 {
			s.ratios[n] = append(s.ratios[n], res.load.PerSec()/base)
		}
	}
	return nil
}

// write prints the medians over the rounds and the ratio of the last
// count to the first.
func (s *scaleSummary) write(w io.Writer, counts []int, rounds int) {
	fmt.Fprintf(w, "\nmedians over %d round(s):\n", rounds)
	for _, n := range counts {
		fmt.Fprintf(w, "  %d replica(s): %.0f decisions/s, %.1f cpu-µs/decision; failure detector in its windows: %s\n",
			n, median(s.perSec[n]), median(s.cpu[n]), s.detector[n])
	}
	first := counts[0]
	for _, n := range counts[1:] {
		if len(s.ratios[n]) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %d vs %d replica(s): %.2fx decisions/s (per round: %s); from CPU per decision: %.2fx\n",
			n, first, median(s.ratios[n]), formatRatios(s.ratios[n]),
			float64(n)/float64(first)*median(s.cpu[first])/median(s.cpu[n]))
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func formatFloats(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(parts, " ")
}

func formatRatios(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.FormatFloat(r, 'f', 2, 64) + "x"
	}
	return strings.Join(parts, " ")
}

type scaleResult struct {
	load           bench.DecisionLoadResult
	cpuPerDecision float64 // µs of replica CPU, all replicas together
	clientCores    float64 // CPU the load generator used, in cores
	perReplica     []float64
	// detector is what the replicas' failure detectors did from the
	// start of the warm-up to the end of the window.
	detector bench.DetectorCounts
}

// scalePoint starts a cluster of n, measures it once and stops it.
func scalePoint(ctx context.Context, f scaleFlags, exe string, static []string, prompts [][]uint32, n int) (scaleResult, error) {
	c, err := startScaleCluster(ctx, f, exe, static, n)
	if err != nil {
		return scaleResult{}, err
	}
	defer stopScaleCluster(c)
	return measureScale(ctx, f, c, prompts, f.warmup, f.measure)
}

func startScaleCluster(ctx context.Context, f scaleFlags, exe string, static []string, n int) (*bench.ProcessCluster, error) {
	dir := filepath.Join(f.out, fmt.Sprintf("replicas-%d", n))
	_ = os.RemoveAll(dir)
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return bench.StartProcessCluster(startCtx, bench.ProcessClusterOptions{
		Command: []string{exe, replicaCommand}, Replicas: n, CPUPerReplica: f.cpuPerReplica, Dir: dir, NoGossip: f.noGossip,
		Args: append([]string{"--block-size", strconv.Itoa(f.blockSize), "--router-active-sequence-stride", strconv.Itoa(f.stride),
			"--static-workers", strings.Join(static, ","), "--log-level", "warn"}, strings.Fields(f.replicaArgs)...),
	})
}

func stopScaleCluster(c *bench.ProcessCluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// measureScale loads a running cluster for warmup+measure and samples the
// replicas' CPU around the measured window only.
func measureScale(ctx context.Context, f scaleFlags, c *bench.ProcessCluster, prompts [][]uint32, warmup, measure time.Duration) (scaleResult, error) {
	n := len(c.Replicas)
	urls := c.URLs()
	if f.loadReplicas > 0 && f.loadReplicas < n {
		urls = urls[:f.loadReplicas]
	}
	load := bench.DecisionLoadConfig{URLs: urls, Clients: f.clientsPerRepl * len(urls), Warmup: warmup, Duration: measure, Prompts: prompts}
	sample := func() ([]time.Duration, time.Duration, error) {
		per := make([]time.Duration, n)
		for i, r := range c.Replicas {
			t, err := r.CPUTime()
			if err != nil {
				return nil, 0, err
			}
			per[i] = t
		}
		return per, selfCPU(), nil
	}
	var cpu0, cpuEnd []time.Duration
	var self0, selfEnd time.Duration
	done := make(chan struct{})
	var sampleErr error
	go func() {
		defer close(done)
		select {
		case <-time.After(warmup):
		case <-ctx.Done():
			return
		}
		if cpu0, self0, sampleErr = sample(); sampleErr != nil {
			return
		}
		select {
		case <-time.After(measure):
		case <-ctx.Done():
			return
		}
		cpuEnd, selfEnd, sampleErr = sample()
	}()
	det0, err := bench.ScrapeDetector(ctx, c.URLs())
	if err != nil {
		return scaleResult{}, err
	}
	res, err := bench.RunDecisionLoad(ctx, load)
	<-done
	if err != nil {
		return scaleResult{}, err
	}
	if sampleErr != nil {
		return scaleResult{}, sampleErr
	}
	det1, err := bench.ScrapeDetector(ctx, c.URLs())
	if err != nil {
		return scaleResult{}, err
	}
	out := scaleResult{load: res, detector: det1.Sub(det0)}
	if res.Decisions > 0 {
		for i := range cpuEnd {
			us := float64((cpuEnd[i] - cpu0[i]).Microseconds()) / float64(res.Decisions)
			out.perReplica = append(out.perReplica, us)
			out.cpuPerDecision += us
		}
	}
	out.clientCores = (selfEnd - self0).Seconds() / res.Elapsed.Seconds()
	return out, nil
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("replica count %q: want a positive integer", part)
		}
		out = append(out, n)
	}
	return out, nil
}

func capText(cores float64) string {
	if cores <= 0 {
		return "uncapped"
	}
	return strconv.FormatFloat(cores, 'g', -1, 64)
}
