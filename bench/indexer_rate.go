package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// IndexerRateConfig sizes a paced indexer run: for each pace, the
// router, its index emptied, ingests the Mooncake trace's KV events (looped as needed) at
// that pace for Step while lookups arrive open loop at LookupRate.
type IndexerRateConfig struct {
	Plan      IndexerPlanConfig
	TracePath string
	// Requests caps the trace lines used (0 = all).
	Requests   int
	Shards     int // 0 = GOMAXPROCS
	Paces      []EventPace
	LookupRate float64
	Step       time.Duration
	// Warmup is the start of each step whose lookups are not counted
	// (the index fills from empty).
	Warmup time.Duration
	// MaxInFlight bounds concurrent lookups; a lookup due while that many
	// are out waits (its latency still counts from its scheduled time).
	MaxInFlight int
	FullRoute   bool
	// Warm runs the highest pace once before the measured steps, and
	// reports it apart: a fresh process's first pass faults in the heap
	// the index grows into (the kernel zeroing every new page), which
	// halves what it ingests on this machine; a router that has run for
	// a minute holds that memory already.
	Warm bool
	// Steady measures an index at steady state instead of one filling
	// from empty: the trace's events are replayed unpaced until the
	// planned fleet's caches are SteadyFill full, then every step goes
	// on from where the last one left the trace, never clearing the
	// index. Every stored block then follows an eviction, as in a router
	// that has run for a while; Warm is not needed (the fill is it).
	Steady bool
	// StatusEvery, when set, asks the router for its status (as a metrics
	// scrape or GET /workers does) at that interval during each step, with
	// the index digest when StatusDigest is set: what those calls cost
	// the lookups.
	StatusEvery  time.Duration
	StatusDigest bool
	// DumpEvery, when set, dumps the index at that interval during each
	// step, as the snapshot replica does when it purges the event stream.
	DumpEvery time.Duration
	// GCPercent and MemoryLimit are recorded in the report as applied.
	GCPercent   int
	MemoryLimit int64
	Logger      *slog.Logger
	// BeforeSteps, when set, is called once the events are planned (and
	// a steady run's fill is applied), just before the first step or the
	// warm-up pass: a CPU profile started there covers what is measured.
	BeforeSteps func() error
	// OnPoint, when set, is called with each point as its step ends (a
	// long run's progress).
	OnPoint func(IndexerRatePoint)
}

// maxPlannedEvents bounds the events planned up front (their memory).
const maxPlannedEvents = 4_000_000

// SteadyFill is how full (of Workers × CapacityBlocks) a steady run fills
// the fleet's caches before its first step.
const SteadyFill = 0.95

// fillChunk is how many fill events are sent between barriers: the fill
// is unpaced, and the barrier keeps it under the shards' backlog bound
// (an event over it would be dropped).
const fillChunk = 2048

// Validate rejects a run that cannot be measured.
func (c IndexerRateConfig) Validate() error {
	if len(c.Paces) == 0 {
		return fmt.Errorf("%w: no event rate or speedup given", ErrBadIndexerPlan)
	}
	for _, p := range c.Paces {
		if err := p.Validate(); err != nil {
			return err
		}
	}
	if !(c.LookupRate > 0) || c.Step <= 0 || c.Warmup < 0 || c.Warmup >= c.Step || c.MaxInFlight <= 0 {
		return fmt.Errorf("%w: lookup rate, step and max in-flight must be > 0 and warmup in [0, step)", ErrBadIndexerPlan)
	}
	return c.Plan.Validate()
}

// RunIndexerRates runs one step per pace, in the order given.
func RunIndexerRates(ctx context.Context, cfg IndexerRateConfig) (IndexerRateReport, error) {
	rep := IndexerRateReport{Workers: cfg.Plan.Workers, BlockSize: cfg.Plan.BlockSize, CapacityBlocks: cfg.Plan.CapacityBlocks,
		Shards: cfg.Shards, GOMAXPROCS: runtime.GOMAXPROCS(0), LookupRate: cfg.LookupRate,
		StepSeconds: cfg.Step.Seconds(), WarmupSeconds: cfg.Warmup.Seconds(), FullRoute: cfg.FullRoute, Trace: cfg.TracePath,
		GCPercent: cfg.GCPercent, MemoryLimit: cfg.MemoryLimit, Steady: cfg.Steady,
		StatusEverySeconds: cfg.StatusEvery.Seconds(), StatusDigest: cfg.StatusDigest, DumpEverySeconds: cfg.DumpEvery.Seconds()}
	if rep.Trace == "" {
		rep.Trace = EmbeddedTraceName
	}
	if rep.Shards == 0 {
		rep.Shards = rep.GOMAXPROCS
	}
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	recs, err := LoadTrace(cfg.TracePath, cfg.Requests)
	if err != nil {
		return rep, err
	}
	store, evs, fill, err := planLooped(recs, cfg)
	if err != nil {
		return rep, err
	}
	// One router for the whole run: registering thousands of workers
	// costs more than a step (each registration republishes the rank
	// table), so steps share it and each starts from an emptied index.
	obs := &stepCounter{}
	acfg := actors.DefaultConfig()
	acfg.BlockSize, acfg.Shards, acfg.Logger, acfg.Observer = cfg.Plan.BlockSize, cfg.Shards, cfg.Logger, obs
	router, err := actors.Start(acfg)
	if err != nil {
		return rep, fmt.Errorf("start router: %w", err)
	}
	defer router.Stop()
	if err := registerWorkers(ctx, router, cfg.Plan); err != nil {
		return rep, err
	}
	offset := 0 // where a steady run's next step starts in evs
	step := func(pace EventPace) (IndexerRatePoint, error) {
		if cfg.Steady {
			pt, err := runPacedStep(ctx, cfg, router, obs, recs, store, evs[offset:], pace)
			offset += pt.Events
			return pt, err
		}
		if err := clearIndex(ctx, router, cfg.Plan.Workers); err != nil {
			return IndexerRatePoint{}, err
		}
		runtime.GC() // the step starts without the last one's garbage
		return runPacedStep(ctx, cfg, router, obs, recs, store, evs, pace)
	}
	if cfg.Steady {
		if err := fillIndex(ctx, router, store, evs[:fill], &rep); err != nil {
			return rep, err
		}
		offset = fill
	}
	if cfg.BeforeSteps != nil {
		if err := cfg.BeforeSteps(); err != nil {
			return rep, err
		}
	}
	if cfg.Warm && !cfg.Steady {
		pt, err := step(slices.MaxFunc(cfg.Paces, cmpPace))
		if err != nil {
			return rep, fmt.Errorf("warm-up pass: %w", err)
		}
		rep.Warm = &pt
	}
	for _, pace := range cfg.Paces {
		pt, err := step(pace)
		if err != nil {
			return rep, err
		}
		rep.Points = append(rep.Points, pt)
		if cfg.OnPoint != nil {
			cfg.OnPoint(pt)
		}
	}
	return rep, nil
}

// planLooped plans the trace's events, looping the trace (the planner's
// worker caches carry over, so a later pass evicts and re-stores) until
// the most demanding pace has enough for a whole step. A steady run needs
// the fill first (fill is its length: the events until the caches are
// SteadyFill full) and then every step's events one after another.
func planLooped(recs []TraceRecord, cfg IndexerRateConfig) (store *eventStore, evs []pacedEvent, fill int, err error) {
	planner, err := NewIndexerPlanner(cfg.Plan)
	if err != nil {
		return nil, nil, 0, err
	}
	store = &eventStore{}
	span := time.Duration(recs[len(recs)-1].TimestampMs-recs[0].TimestampMs)*time.Millisecond + time.Second
	full := int(SteadyFill * float64(cfg.Plan.Workers) * float64(cfg.Plan.CapacityBlocks))
	need := -1
	for pass := 0; ; pass++ {
		before := len(evs)
		for i, r := range recs {
			st, err := planner.Step(r)
			if err != nil {
				return nil, nil, 0, fmt.Errorf("trace request %d: %w", i, err)
			}
			at := time.Duration(pass)*span + time.Duration(r.TimestampMs-recs[0].TimestampMs)*time.Millisecond
			for _, ev := range st.Events {
				evs = append(evs, pacedEvent{ev: store.add(ev), req: i, traceAt: at})
			}
			if cfg.Steady && fill == 0 && planner.CachedBlocks() >= full {
				fill = len(evs)
			}
		}
		if pass == 0 {
			need = eventsNeeded(cfg.Paces, cfg.Step, span, len(evs))
			if cfg.Steady {
				// Steps follow each other in the plan.
				need = 0
				for _, p := range cfg.Paces {
					need += eventsNeeded([]EventPace{p}, cfg.Step, span, len(evs))
				}
			}
			if need > maxPlannedEvents {
				return nil, nil, 0, fmt.Errorf("%w: the steps need %d events, more than %d: shorten the step or lower the rate",
					ErrBadIndexerPlan, need, maxPlannedEvents)
			}
		}
		switch {
		case !cfg.Steady && len(evs) >= need:
			return store, evs, 0, nil
		case cfg.Steady && fill > 0 && len(evs) >= fill+need:
			return store, evs, fill, nil
		case len(evs) > maxPlannedEvents+need:
			return nil, nil, 0, fmt.Errorf("%w: %d planned events fill the caches to %d of %d blocks, short of %.0f%%: lower --capacity-blocks or --workers",
				ErrBadIndexerPlan, len(evs), planner.CachedBlocks(), cfg.Plan.Workers*cfg.Plan.CapacityBlocks, 100*SteadyFill)
		case len(evs) == before:
			// Every request lands where its blocks already are (requests
			// a multiple of workers, caches that hold everything).
			return nil, nil, 0, fmt.Errorf("%w: looping the trace adds no events (%d requests over %d workers): change --requests or --workers",
				ErrBadIndexerPlan, len(recs), cfg.Plan.Workers)
		}
	}
}

// fillIndex applies a steady run's fill events as fast as the shards
// take them and records how long that took and what the index holds.
func fillIndex(ctx context.Context, router *actors.Router, store *eventStore, evs []pacedEvent, rep *IndexerRateReport) error {
	start := time.Now()
	var scratch kv.Event
	for k, e := range evs {
		router.ApplyEvent(store.load(e.ev, &scratch))
		if (k+1)%fillChunk == 0 || k == len(evs)-1 {
			if err := router.Barrier(ctx); err != nil {
				return fmt.Errorf("fill the index: %w", err)
			}
		}
	}
	rep.FillEvents, rep.FillSeconds = len(evs), time.Since(start).Seconds()
	st, err := indexTotals(ctx, router)
	if err != nil {
		return err
	}
	if st.rejected > 0 {
		return fmt.Errorf("fill the index: %d of %d events refused", st.rejected, len(evs))
	}
	rep.FilledBlocks = st.blocks
	runtime.GC() // the first step starts without the fill's garbage
	return nil
}

// stepCounter counts the events the router dropped at its backlog bound
// and the lookups it answered without every shard's scores.
type stepCounter struct {
	actors.NopObserver
	dropped, partial atomic.Int64
}

func (c *stepCounter) BacklogDropped(string) { c.dropped.Add(1) }

func (c *stepCounter) DecisionDegraded(reason string) {
	if reason == "shard_timeout" {
		c.partial.Add(1)
	}
}

// clearIndex empties every worker's blocks (a Cleared event each) and
// waits until the shards applied it.
func clearIndex(ctx context.Context, router *actors.Router, workers int) error {
	for i := range workers {
		router.ApplyEvent(&kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: WorkerID(i)}, Kind: kv.EventCleared})
	}
	if err := router.Barrier(ctx); err != nil {
		return fmt.Errorf("clear the index between steps: %w", err)
	}
	return nil
}

// runPacedStep sends the step's events to router as they come due and
// times lookups from their scheduled times.
func runPacedStep(ctx context.Context, cfg IndexerRateConfig, router *actors.Router, obs *stepCounter,
	recs []TraceRecord, store *eventStore, evs []pacedEvent, pace EventPace) (IndexerRatePoint, error) {
	due := pace.dueTimes(evs, cfg.Step)
	pt := IndexerRatePoint{Speedup: pace.Speedup, Events: len(due), TargetEventsPerSec: pace.Rate}
	if pace.Speedup > 0 {
		pt.TargetEventsPerSec = float64(len(due)) / cfg.Step.Seconds()
	}
	reqs := make([]int, len(due))
	for k := range due {
		reqs[k] = evs[k].req
	}
	dropped0, partial0 := obs.dropped.Load(), obs.partial.Load()
	start := time.Now().Add(20 * time.Millisecond)
	sched, err := NewSchedule(start, cfg.LookupRate, cfg.Step)
	if err != nil {
		return pt, err
	}
	stepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var maxBacklog atomic.Int64
	go sampleBacklog(stepCtx, router, &maxBacklog)
	var statusCalls, dumps atomic.Int64
	if cfg.StatusEvery > 0 {
		go every(stepCtx, cfg.StatusEvery, &statusCalls, func(ctx context.Context) error {
			_, err := router.Status(ctx, cfg.StatusDigest)
			return err
		})
	}
	if cfg.DumpEvery > 0 {
		go every(stepCtx, cfg.DumpEvery, &dumps, func(ctx context.Context) error {
			_, err := router.DumpIndex(ctx)
			return err
		})
	}
	lookups := make(chan lookupResult, 1024)
	var collected []lookupResult
	collectDone := make(chan struct{})
	go func() {
		for r := range lookups {
			collected = append(collected, r)
		}
		close(collectDone)
	}()
	var lookupWG sync.WaitGroup
	lookupWG.Add(1)
	go func() {
		defer lookupWG.Done()
		issueLookups(stepCtx, router, cfg, recs, sched, due, reqs, lookups)
	}()

	before, err := indexTotals(ctx, router)
	if err != nil {
		return pt, err
	}
	schedBefore, gcBefore := schedLatency(), readGC()
	lastSent, err := sendPaced(stepCtx, router, store, evs[:len(due)], due, start)
	if err == nil {
		err = router.Barrier(ctx)
	}
	applied := time.Now()
	gcAfter := readGC()
	pt.GCCycles, pt.GCShare = gcBetween(gcBefore, gcAfter)
	allocRate, every := gcInterval(gcBefore, gcAfter, applied.Sub(start))
	pt.AllocMBPerSec, pt.GCEverySec = allocRate/(1<<20), every
	if err == nil {
		var after indexState
		after, err = indexTotals(ctx, router)
		pt.IndexedBlocks, pt.RejectedEvents = after.blocks, after.rejected-before.rejected
	}
	pt.SchedP99Ms = float64(histogramPercentile(schedBefore, schedLatency(), 99)) / float64(time.Millisecond)
	lookupWG.Wait()
	close(lookups)
	<-collectDone
	if err != nil {
		return pt, fmt.Errorf("paced replay: %w", err)
	}
	pt.DroppedEvents = int(obs.dropped.Load() - dropped0)
	pt.PartialLookups = int(obs.partial.Load() - partial0)
	pt.EventsPerSec = float64(len(due)-pt.DroppedEvents) / max(applied.Sub(start).Seconds(), cfg.Step.Seconds()*1e-3)
	pt.MaxBacklog = int(maxBacklog.Load())
	pt.StatusCalls, pt.Dumps = int(statusCalls.Load()), int(dumps.Load())
	pt.DrainMs = float64(applied.Sub(lastSent)) / float64(time.Millisecond)
	pt.KeptUp = ingestKeptUp(pt.TargetEventsPerSec, pt.EventsPerSec, pt.DroppedEvents)
	summarizeLookups(&pt, collected, cfg.Warmup)
	gcAt := gcPausesSince(start)
	pt.LookupGCCycles = len(gcAt)
	pt.SlowLookups, pt.SlowNearGC = slowLookups(collected, start, cfg.Warmup, DynamoLookupP99, GCNeighbourhood, gcAt)
	return pt, nil
}

// sendPaced hands each event to the router once it is due (all due
// events at each wake-up), never waiting for the index: the events
// arrive open loop, as a bus delivers them. It returns when the last
// was sent.
func sendPaced(ctx context.Context, router *actors.Router, store *eventStore, evs []pacedEvent, due []time.Duration, start time.Time) (time.Time, error) {
	var scratch kv.Event // the router copies what it is handed
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for k := 0; k < len(evs); {
		if err := ctx.Err(); err != nil {
			return time.Now(), err
		}
		waitUntil(ctx, timer, start.Add(due[k]))
		now := time.Since(start)
		for ; k < len(evs) && due[k] <= now; k++ {
			router.ApplyEvent(store.load(evs[k].ev, &scratch))
		}
	}
	return time.Now(), nil
}

// sampleBacklog keeps the largest event backlog seen every 10 ms.
func sampleBacklog(ctx context.Context, router *actors.Router, peak *atomic.Int64) {
	every(ctx, 10*time.Millisecond, nil, func(context.Context) error {
		if n := int64(router.EventBacklog()); n > peak.Load() {
			peak.Store(n)
		}
		return nil
	})
}

type lookupResult struct {
	at      time.Duration // scheduled offset
	latency time.Duration // from the scheduled time to the answer
	late    bool
	err     bool
}

// issueLookups sends lookup i at sched.At(i) whatever the earlier ones
// are doing (at most cfg.MaxInFlight at once), and times each from its
// scheduled time, so a stalled router shows as latency rather than as
// fewer lookups. Prompts are built before their time comes.
func issueLookups(ctx context.Context, router *actors.Router, cfg IndexerRateConfig, recs []TraceRecord,
	sched Schedule, due []time.Duration, reqs []int, out chan<- lookupResult) {
	r := rand.New(rand.NewPCG(uint64(sched.Count), 17))
	synth := NewTraceSynth()
	sem := make(chan struct{}, cfg.MaxInFlight)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range sched.Count {
		at := sched.Offset(i)
		rec := recs[lookupRequest(due, reqs, len(recs), at, r.IntN(8))]
		toks, err := synth.Tokens(rec)
		clear(synth.blocks) // keep memory flat over a long run
		scheduled := sched.At(i)
		waitUntil(ctx, timer, scheduled)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		late := time.Since(scheduled) > time.Millisecond
		if err != nil {
			out <- lookupResult{at: at, err: true, late: late}
			<-sem
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			var err error
			if cfg.FullRoute {
				_, err = router.Route(lctx, &messages.RouteRequest{RequestId: fmt.Sprintf("q-%d", i), TokenIds: toks})
			} else {
				_, err = router.OverlapScores(lctx, toks, "")
			}
			out <- lookupResult{at: at, latency: time.Since(scheduled), late: late,
				err: err != nil && !errors.Is(err, context.Canceled)}
		}()
	}
}

// summarizeLookups fills the lookup columns from the results scheduled
// after warmup. A failed lookup's time counts too: it did not answer
// sooner.
func summarizeLookups(pt *IndexerRatePoint, rs []lookupResult, warmup time.Duration) {
	var lat []time.Duration
	for _, r := range rs {
		if r.at < warmup {
			continue
		}
		pt.Lookups++
		if r.err {
			pt.LookupErrors++
		}
		if r.late {
			pt.LateLookups++
		}
		lat = append(lat, r.latency)
	}
	slices.Sort(lat)
	pt.LookupMs = SummarizeLatency(lat)
	pt.WindowP99Ms = windowP99(rs, warmup)
}

// windowP99 is the lookup p99 of each LookupWindow from warmup on (nil for
// fewer than three windows of lookups).
func windowP99(rs []lookupResult, warmup time.Duration) []float64 {
	var windows [][]time.Duration
	for _, r := range rs {
		if r.at < warmup {
			continue
		}
		k := int((r.at - warmup) / LookupWindow)
		for len(windows) <= k {
			windows = append(windows, nil)
		}
		windows[k] = append(windows[k], r.latency)
	}
	if len(windows) < 3 {
		return nil
	}
	out := make([]float64, len(windows))
	for k, lat := range windows {
		slices.Sort(lat)
		if len(lat) > 0 {
			out[k] = float64(DurationPercentile(lat, 99)) / float64(time.Millisecond)
		}
	}
	return out
}

// indexState is what the shards hold and have refused so far.
type indexState struct{ blocks, rejected uint64 }

// rejectionCounters are the index counters of events it refused.
var rejectionCounters = []string{"invalid_event", "invalid_sequence", "parent_not_found"}

func indexTotals(ctx context.Context, router *actors.Router) (indexState, error) {
	stats, err := router.ShardStats(ctx, false)
	if err != nil {
		return indexState{}, fmt.Errorf("shard stats: %w", err)
	}
	var st indexState
	for _, s := range stats {
		for _, b := range s.Blocks {
			st.blocks += b.Blocks
		}
		for _, c := range rejectionCounters {
			st.rejected += s.Counters[c]
		}
	}
	return st, nil
}
