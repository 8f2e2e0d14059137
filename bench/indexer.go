package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// IndexerBenchConfig sizes the indexer benchmark: the Mooncake trace's
// requests become KV events of Workers engines, replayed as fast as the
// router absorbs them while Queriers goroutines issue routing queries.
type IndexerBenchConfig struct {
	Plan      IndexerPlanConfig
	TracePath string
	// Requests caps the trace lines replayed (0 = all).
	Requests int
	// Queriers is how many goroutines issue routing queries concurrently.
	Queriers int
	// SyncEvery is how many trace requests' events are sent between
	// barriers that wait for the shards to catch up; it bounds how far the
	// event stream may run ahead of the index, as a real event bus would.
	SyncEvery int
	// Shards is the router's indexer shard count (0 = GOMAXPROCS).
	Shards int
	// FullRoute times whole routing decisions (hash, shards, load,
	// select) instead of index lookups only (hash, every shard's
	// FindMatches, merged overlap scores), which is what Dynamo's
	// Mooncake indexer benchmark times.
	FullRoute bool
	Logger    *slog.Logger
}

// IndexerBenchResult is what one replay measured.
type IndexerBenchResult struct {
	Workers      int
	Requests     int
	Events       int
	StoredBlocks int
	Elapsed      time.Duration
	EventsPerSec float64
	Queries      int
	QueryErrors  int
	QueryPerSec  float64
	QueryP50     time.Duration
	QueryP99     time.Duration
}

// OpsPerSec is events and queries together, the figure Dynamo reports.
func (r IndexerBenchResult) OpsPerSec() float64 { return r.EventsPerSec + r.QueryPerSec }

// WriteText prints the result for people.
func (r IndexerBenchResult) WriteText(w io.Writer) {
	fmt.Fprintf(w, "workers %d, trace requests %d, events %d (%d blocks stored), replay %s\n",
		r.Workers, r.Requests, r.Events, r.StoredBlocks, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "events:  %.0f ops/s\n", r.EventsPerSec)
	fmt.Fprintf(w, "queries: %.0f ops/s (%d, %d errors), p50 %s, p99 %s\n",
		r.QueryPerSec, r.Queries, r.QueryErrors, r.QueryP50.Round(time.Microsecond), r.QueryP99.Round(time.Microsecond))
	fmt.Fprintf(w, "total:   %.0f ops/s (Dynamo branch-sharded indexer: 30,411 ops/s peak, p99 %v at 7,000 workers)\n", r.OpsPerSec(), DynamoLookupP99)
}

// RunIndexerBench replays the trace against an in-process router.
func RunIndexerBench(ctx context.Context, cfg IndexerBenchConfig) (IndexerBenchResult, error) {
	if cfg.Queriers < 0 || cfg.SyncEvery <= 0 {
		return IndexerBenchResult{}, fmt.Errorf("%w: queriers must be >= 0 and sync-every > 0", ErrBadIndexerPlan)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	recs, err := LoadTrace(cfg.TracePath, cfg.Requests)
	if err != nil {
		return IndexerBenchResult{}, err
	}
	steps, stored, err := planAll(recs, cfg.Plan)
	if err != nil {
		return IndexerBenchResult{}, err
	}
	acfg := actors.DefaultConfig()
	acfg.BlockSize = cfg.Plan.BlockSize
	acfg.Shards = cfg.Shards
	acfg.Logger = log
	router, err := actors.Start(acfg)
	if err != nil {
		return IndexerBenchResult{}, fmt.Errorf("start router: %w", err)
	}
	defer router.Stop()
	if err := registerWorkers(ctx, router, cfg.Plan); err != nil {
		return IndexerBenchResult{}, err
	}

	res := IndexerBenchResult{Workers: cfg.Plan.Workers, Requests: len(recs), StoredBlocks: stored}
	var pos atomic.Int64 // the trace request the replay has reached
	replayDone := make(chan struct{})
	var lat []time.Duration
	var queries, qerrs int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for q := range cfg.Queriers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, n, e := queryLoop(ctx, router, recs, &pos, replayDone, uint64(q), cfg.FullRoute)
			mu.Lock()
			lat, queries, qerrs = append(lat, l...), queries+n, qerrs+e
			mu.Unlock()
		}()
	}

	start := time.Now()
	events, err := replay(ctx, router, steps, cfg.SyncEvery, &pos)
	res.Elapsed = time.Since(start)
	close(replayDone)
	wg.Wait()
	if err != nil {
		return res, err
	}
	res.Events = events
	res.EventsPerSec = float64(events) / res.Elapsed.Seconds()
	res.Queries, res.QueryErrors = queries, qerrs
	res.QueryPerSec = float64(queries) / res.Elapsed.Seconds()
	ms := millis(lat)
	res.QueryP50 = time.Duration(finite(Percentile(ms, 50)) * float64(time.Millisecond))
	res.QueryP99 = time.Duration(finite(Percentile(ms, 99)) * float64(time.Millisecond))
	return res, nil
}

// planAll computes every request's events before the clock starts, so
// the replay measures the router and not the planner's hashing.
func planAll(recs []TraceRecord, cfg IndexerPlanConfig) ([][]*kv.Event, int, error) {
	planner, err := NewIndexerPlanner(cfg)
	if err != nil {
		return nil, 0, err
	}
	steps := make([][]*kv.Event, len(recs))
	stored := 0
	for i, r := range recs {
		st, err := planner.Step(r)
		if err != nil {
			return nil, 0, fmt.Errorf("trace request %d: %w", i, err)
		}
		steps[i] = st.Events
		for _, ev := range st.Events {
			stored += len(ev.Blocks)
		}
	}
	return steps, stored, nil
}

// registerWorkers registers every planned worker statically and waits
// until the scheduler lists them all.
func registerWorkers(ctx context.Context, router *actors.Router, cfg IndexerPlanConfig) error {
	// All but the last are announced without waiting, so they share one
	// rank table; the last waits for the table that holds them all.
	for i := range cfg.Workers {
		hb := &messages.WorkerHeartbeat{
			WorkerId: uint64(WorkerID(i)), DataParallelSize: 1, BlockSize: uint32(cfg.BlockSize),
			TotalKvBlocks: uint64(cfg.CapacityBlocks), ModelName: "mooncake",
		}
		var err error
		if i < cfg.Workers-1 {
			err = router.AnnounceWorker(hb, true) // static: the bench sends no heartbeats
		} else {
			err = router.RegisterWorker(hb, true)
		}
		if err != nil {
			return err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		reg, err := router.Registry(ctx)
		if err != nil {
			return fmt.Errorf("registry: %w", err)
		}
		if len(reg.Workers) == cfg.Workers {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d workers registered after 30s", len(reg.Workers), cfg.Workers)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// replay applies every request's events in trace order, waiting for the
// shards every syncEvery requests and once at the end, so the elapsed
// time covers the events being indexed, not only enqueued.
func replay(ctx context.Context, router *actors.Router, steps [][]*kv.Event, syncEvery int, pos *atomic.Int64) (int, error) {
	events := 0
	for i, evs := range steps {
		for _, ev := range evs {
			router.ApplyEvent(ev)
		}
		events += len(evs)
		pos.Store(int64(i))
		if (i+1)%syncEvery == 0 || i == len(steps)-1 {
			if err := ctx.Err(); err != nil {
				return events, err
			}
			if err := router.Barrier(ctx); err != nil {
				return events, fmt.Errorf("wait for shards: %w", err)
			}
		}
	}
	return events, nil
}

// queryLoop routes prompts of requests just ahead of the replay (those a
// router would be asked about next) until the replay ends. The prompt is
// synthesized outside the timed section.
func queryLoop(ctx context.Context, router *actors.Router, recs []TraceRecord, pos *atomic.Int64, done <-chan struct{}, seed uint64, fullRoute bool) ([]time.Duration, int, int) {
	r := rand.New(rand.NewPCG(seed, 17))
	synth := NewTraceSynth()
	var lat []time.Duration
	var n, errs int
	for {
		select {
		case <-done:
			return lat, n, errs
		case <-ctx.Done():
			return lat, n, errs
		default:
		}
		idx := min(int(pos.Load())+1+r.IntN(8), len(recs)-1)
		toks, err := synth.Tokens(recs[idx])
		clear(synth.blocks) // keep memory flat over a long replay
		if err != nil {
			errs++
			continue
		}
		start := time.Now()
		if fullRoute {
			_, err = router.Route(ctx, &messages.RouteRequest{RequestId: fmt.Sprintf("q-%d-%d", seed, n), TokenIds: toks})
		} else {
			_, err = router.OverlapScores(ctx, toks, "")
		}
		lat = append(lat, time.Since(start))
		n++
		if err != nil && !errors.Is(err, context.Canceled) {
			errs++
		}
	}
}
