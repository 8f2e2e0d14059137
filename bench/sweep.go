package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Fleet is a running set of mock workers and, for the kvrouter policy, a
// router in front of them. A sweep starts a fresh fleet for every
// (policy, QPS) point so each one starts with cold caches.
type Fleet interface {
	// RouterURLs are the base URLs of the router replicas' proxies (none
	// for the client-side policies). With several, the client spreads
	// requests over them round-robin, as a load balancer would.
	RouterURLs() []string
	// WorkerURLs are the base URLs of the workers.
	WorkerURLs() []string
	// Close stops everything the fleet started.
	Close(ctx context.Context) error
}

// FleetFactory starts a fleet for one policy that is ready to serve:
// every worker is up and, for a router policy (IsRouterPolicy), registered
// with a router running that policy's cost (RouterCost).
type FleetFactory func(ctx context.Context, policy string) (Fleet, error)

// ScheduleFunc returns the requests of one sweep point at the given QPS.
type ScheduleFunc func(qps float64) ([]Request, error)

// SweepConfig says what to measure.
type SweepConfig struct {
	Workload string
	QPS      []float64
	Policies []string
	// BlockSize is the fleet's KV block size, used for the oracle.
	BlockSize int
	// Oracle describes the fleet for the capacity- and time-bounded
	// oracles (OracleBounds); with no ranks only oracle_unbounded is
	// computed.
	Oracle OracleFleet
	// Warmup is how many leading requests of each point only warm the
	// caches: they are sent, but left out of the point's figures and of
	// its oracles (production fleets run warm; a short run starting cold
	// measures mostly first-time misses).
	Warmup int
	// RequestTimeout bounds one request, queueing included.
	RequestTimeout time.Duration
	Seed           uint64
	Model          string
	Logger         *slog.Logger
	// Progress, when set, receives one plain line as each point starts
	// and every few seconds while it runs: which point of how many,
	// requests done, time elapsed and the sweep's estimated time left.
	Progress io.Writer
	// Repeats is how many times each (policy, QPS) point is measured, on
	// the same schedule, each time on a fresh fleet; the policy order is
	// rotated between runs (RotatedOrder) and the report gives each
	// figure's median and range (MedianPoint). 0 counts as 1.
	Repeats int
}

// Sweep measures every policy at every QPS point, Repeats times. A point
// that cannot start its fleet aborts the sweep; failed requests are only
// counted.
func Sweep(ctx context.Context, cfg SweepConfig, schedule ScheduleFunc, newFleet FleetFactory) (*Report, error) {
	if len(cfg.QPS) == 0 || len(cfg.Policies) == 0 {
		return nil, errors.New("sweep needs at least one QPS point and one policy")
	}
	if cfg.Repeats < 0 {
		return nil, fmt.Errorf("%w: repeats must be >= 1, got %d", ErrBadWorkload, cfg.Repeats)
	}
	if cfg.Warmup < 0 {
		return nil, fmt.Errorf("%w: warm-up must be >= 0 requests, got %d", ErrBadWorkload, cfg.Warmup)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger
	repeats := max(cfg.Repeats, 1)
	rep := &Report{Workload: cfg.Workload, Seed: cfg.Seed, Repeats: repeats}
	var measured []string
	for _, p := range cfg.Policies {
		if p != PolicyOracle {
			measured = append(measured, p)
		}
	}
	schedules := make([][]Request, len(cfg.QPS))
	var spans []time.Duration
	for i, qps := range cfg.QPS {
		reqs, err := schedule(qps)
		if err != nil {
			return nil, fmt.Errorf("schedule at qps %v: %w", qps, err)
		}
		schedules[i] = reqs
		for range repeats * len(measured) {
			spans = append(spans, arrivalSpan(reqs))
		}
	}
	var prog *sweepProgress
	if cfg.Progress != nil {
		prog = newSweepProgress(cfg.Progress, spans)
	}
	for i, qps := range cfg.QPS {
		reqs := schedules[i]
		bounds, err := cfg.bounds(reqs)
		if err != nil {
			return nil, fmt.Errorf("oracle bounds at qps %v: %w", qps, err)
		}
		log.Info("oracle bounds", "qps", qps, "unbounded", fmt.Sprintf("%.3f", bounds.Unbounded),
			"capacity", fmt.Sprintf("%.3f", bounds.Capacity), "timed", fmt.Sprintf("%.3f", bounds.Timed),
			"ttft_p90_floor_ms", fmt.Sprintf("%.1f", bounds.TTFTFloorP90))
		runs := map[string][]Point{}
		for r := range repeats {
			for _, policy := range RotatedOrder(measured, r) {
				if err := ctx.Err(); err != nil {
					return rep, err
				}
				start := time.Now()
				pt, err := measure(ctx, cfg, policy, qps, reqs, newFleet, prog)
				if err != nil {
					return rep, fmt.Errorf("%s at qps %v (run %d of %d): %w", policy, qps, r+1, repeats, err)
				}
				log.Info("point done", "policy", policy, "qps", qps, "run", r+1, "requests", len(reqs),
					"hit_rate", fmt.Sprintf("%.3f", pt.HitRate), "ttft_p90_ms", fmt.Sprintf("%.1f", pt.TTFTP90),
					"tok_s", fmt.Sprintf("%.0f", pt.ThroughputTokS), "errors", pt.Errors,
					"took", time.Since(start).Round(100*time.Millisecond))
				runs[policy] = append(runs[policy], pt)
			}
		}
		for _, policy := range cfg.Policies {
			pt := Point{Name: PolicyOracle, QPS: qps, HitRate: bounds.Unbounded}
			if policy != PolicyOracle {
				if pt, err = MedianPoint(runs[policy]); err != nil {
					return rep, err
				}
			}
			pt.Bounds = bounds
			rep.Policies = append(rep.Policies, pt)
		}
	}
	return rep, nil
}

// bounds computes the oracles and the TTFT floor of one schedule (only
// the unbounded oracle when the fleet is not described).
func (cfg SweepConfig) bounds(reqs []Request) (Bounds, error) {
	if cfg.Warmup >= len(reqs) && len(reqs) > 0 {
		return Bounds{}, fmt.Errorf("%w: a warm-up of %d requests leaves none of %d to measure", ErrBadWorkload, cfg.Warmup, len(reqs))
	}
	if cfg.Oracle.Ranks == 0 {
		hit, err := oracleUnbounded(reqs, cfg.BlockSize, cfg.Warmup)
		return Bounds{Unbounded: hit}, err
	}
	b, err := OracleBoundsAfter(reqs, cfg.Oracle, cfg.Warmup)
	if err != nil || len(reqs) == 0 {
		return b, err
	}
	b.TTFTFloorP90, err = TTFTFloorP90(reqs, cfg.Oracle, cfg.Warmup)
	return b, err
}

func measure(ctx context.Context, cfg SweepConfig, policy string, qps float64, reqs []Request, newFleet FleetFactory, prog *sweepProgress) (Point, error) {
	if policy == PolicyOracle {
		return Point{Name: PolicyOracle, QPS: qps}, nil
	}
	prog.startPoint(policy, qps, len(reqs))
	defer prog.endPoint()
	fleet, err := newFleet(ctx, policy)
	if err != nil {
		return Point{}, fmt.Errorf("start fleet: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := fleet.Close(cctx); err != nil {
			cfg.Logger.Warn("fleet close", "err", err)
		}
	}()
	d, err := NewDispatcher(policy, fleet.RouterURLs(), fleet.WorkerURLs(), cfg.Seed)
	if err != nil {
		return Point{}, err
	}
	counted := newCountingDispatcher(d)
	d = counted
	wctx, stopWatch := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		prog.watch(wctx, policy, qps, counted, len(reqs))
	}()
	// The watcher stops before endPoint (deferred earlier) updates the
	// counts it reads.
	defer func() { stopWatch(); <-watching }()
	client := &Client{HTTP: newHTTPClient(), Model: cfg.Model}
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	sampler := startLoadSampler(ctx, client.HTTP, fleet.WorkerURLs(), cfg.BlockSize)
	routers := fleet.RouterURLs()
	var det0 DetectorCounts
	if len(routers) > 1 {
		if det0, err = ScrapeDetector(ctx, routers); err != nil {
			return Point{}, err
		}
	}
	results := Run(ctx, reqs, d, client, timeout)
	pt := Summarize(policy, qps, results[min(cfg.Warmup, len(results)):])
	pt.LoadSpread = sampler.stop()
	if len(routers) > 1 {
		det, err := ScrapeDetector(ctx, routers)
		if err != nil {
			return Point{}, err
		}
		det = det.Sub(det0)
		pt.Detector = &det
	}
	if len(routers) > 0 {
		if pt.DisaggPaths, err = disaggPaths(ctx, client.HTTP, routers); err != nil {
			cfg.Logger.Warn("disaggregation paths not read", "err", err)
		}
	}
	return pt, nil
}
