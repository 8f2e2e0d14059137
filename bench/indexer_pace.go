package bench

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// pacedEvent is one planned KV event with the trace request it belongs
// to and that request's time in the (looped) trace.
type pacedEvent struct {
	ev      int           // index in the plan's eventStore
	req     int           // index into the trace records
	traceAt time.Duration // pass × trace span + the record's timestamp
}

// EventPace says when a step's events are due: at a fixed Rate (events/s),
// or at the trace's own times divided by Speedup. Exactly one is set.
type EventPace struct {
	Rate    float64
	Speedup float64
}

// Validate rejects a pace that sets neither or both, or a non-positive one.
func (p EventPace) Validate() error {
	ok := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) }
	switch {
	case p.Rate != 0 && p.Speedup != 0:
		return fmt.Errorf("%w: set an event rate or a speedup, not both", ErrBadIndexerPlan)
	case p.Rate != 0 && !ok(p.Rate):
		return fmt.Errorf("%w: event rate must be a positive number, got %v", ErrBadIndexerPlan, p.Rate)
	case p.Speedup != 0 && !ok(p.Speedup):
		return fmt.Errorf("%w: speedup must be a positive number, got %v", ErrBadIndexerPlan, p.Speedup)
	case p.Rate == 0 && p.Speedup == 0:
		return fmt.Errorf("%w: an event rate or a speedup is required", ErrBadIndexerPlan)
	}
	return nil
}

// cmpPace orders paces by how fast they send (a run's paces are all
// rates or all speedups).
func cmpPace(a, b EventPace) int {
	if c := cmp.Compare(a.Rate, b.Rate); c != 0 {
		return c
	}
	return cmp.Compare(a.Speedup, b.Speedup)
}

// dueTimes is when each event of the step is due after its start, for the
// events that fall inside span: event k at k/Rate, or its request's trace
// time / Speedup (a request's events share its time). evs must be in
// trace order; the result is non-decreasing.
func (p EventPace) dueTimes(evs []pacedEvent, span time.Duration) []time.Duration {
	var out []time.Duration
	for k, e := range evs {
		var d time.Duration
		if p.Rate > 0 {
			d = time.Duration(math.Round(float64(k) * float64(time.Second) / p.Rate))
		} else {
			// From the first event's trace time: a steady run's step
			// starts where the last one left the trace.
			d = time.Duration(math.Round(float64(e.traceAt-evs[0].traceAt) / p.Speedup))
		}
		if d >= span {
			break
		}
		out = append(out, d)
	}
	return out
}

// eventsNeeded is how many planned events the slowest-to-cover pace of
// paces needs for span (the trace is looped until that many exist), given
// the trace's span and event count per pass.
func eventsNeeded(paces []EventPace, span time.Duration, traceSpan time.Duration, perPass int) int {
	need := 0
	for _, p := range paces {
		if p.Rate > 0 {
			need = max(need, int(math.Ceil(p.Rate*span.Seconds())))
			continue
		}
		// Trace time covered at this speedup, in passes, rounded up.
		passes := int(math.Ceil(span.Seconds()*p.Speedup/max(traceSpan.Seconds(), 1e-3))) + 1
		need = max(need, passes*perPass)
	}
	return need
}

// lookupRequest is the trace request a lookup at offset t asks about: one
// of the few just after the last request whose events are due by t (the
// requests a router is asked to place next), chosen by pick in [0, 8).
// reqs and due are the step's events' requests and due times.
func lookupRequest(due []time.Duration, reqs []int, records int, t time.Duration, pick int) int {
	k, _ := slices.BinarySearch(due, t+1) // events due at or before t
	cur := -1
	if k > 0 {
		cur = reqs[k-1]
	}
	return (cur + 1 + pick) % records
}

// ingestKeptUp says whether ingest kept pace: nothing was dropped at the
// shards' backlog bound and the events were applied at (nearly) the rate
// they were due. A backlog that builds up and drains only after the last
// event shows up as a lower achieved rate.
func ingestKeptUp(target, achieved float64, dropped int) bool {
	return dropped == 0 && achieved >= 0.95*target
}

// IndexerRatePoint is what one paced step measured.
type IndexerRatePoint struct {
	// TargetEventsPerSec is the pace (for a speedup, the events due over
	// the step's span).
	TargetEventsPerSec float64 `json:"target_events_per_sec"`
	Speedup            float64 `json:"speedup,omitempty"`
	Events             int     `json:"events"`
	// EventsPerSec is events applied ÷ time until the last was applied.
	EventsPerSec  float64 `json:"events_per_sec"`
	DroppedEvents int     `json:"dropped_events"`
	// MaxBacklog is the most events sent and not yet applied at any
	// 10 ms sample; DrainMs the time from the last send to the last apply.
	MaxBacklog   int     `json:"max_backlog"`
	DrainMs      float64 `json:"drain_ms"`
	KeptUp       bool    `json:"kept_up"`
	Lookups      int     `json:"lookups"`
	LookupErrors int     `json:"lookup_errors"`
	// PartialLookups were answered without some shard's scores: the
	// shard did not reply within the router's decision timeout (250 ms
	// by default), so its workers counted as holding nothing. Whole step,
	// warmup included.
	PartialLookups int       `json:"partial_lookups"`
	LookupMs       LatencyMs `json:"lookup_ms"`
	// LateLookups were dispatched more than 1 ms after their scheduled
	// time (the harness could not keep its own pace; latency still counts
	// from the schedule).
	LateLookups int `json:"late_lookups"`
	// SchedP99Ms is the p99 of how long the process's goroutines waited
	// runnable for a processor during the step (Go runtime metric).
	SchedP99Ms float64 `json:"sched_latency_p99_ms"`
	// IndexedBlocks is the (rank, block) entries the index holds when the
	// step's events are applied, and RejectedEvents the step's events the
	// index refused (unknown parent, malformed chain...): a step whose
	// events were not applied measures an empty index.
	IndexedBlocks  uint64 `json:"indexed_blocks"`
	RejectedEvents uint64 `json:"rejected_events"`
	// GCCycles ran during the step, and GCShare is the GC's part of the
	// CPU time the process had (mark workers, assists, pauses), both from
	// Go's runtime metrics: how much of a tail is the collector.
	GCCycles int     `json:"gc_cycles"`
	GCShare  float64 `json:"gc_cpu_share"`
	// AllocMBPerSec is what the process allocated per second during the
	// step, and GCEverySec the interval between GC cycles it implies (the
	// room between the live heap and the GC goal ÷ that rate): a step
	// shorter than that interval may see no cycle at all, while a router
	// at this rate sees one every GCEverySec.
	AllocMBPerSec float64 `json:"alloc_mb_per_sec"`
	GCEverySec    float64 `json:"gc_every_sec"`
	// StatusCalls is how many status calls (StatusEvery) were answered
	// during the step.
	StatusCalls int `json:"status_calls,omitempty"`
	// Dumps is how many index dumps (DumpEvery) completed during the step.
	Dumps int `json:"dumps,omitempty"`
	// WindowP99Ms is the lookup p99 of each LookupWindow of a step at
	// least three windows long, by scheduled time: whether a step's tail
	// is spread over it or comes from a few bad seconds.
	WindowP99Ms []float64 `json:"window_p99_ms,omitempty"`
	// SlowLookups took longer than DynamoLookupP99 (from warmup on), and
	// SlowNearGC of them came within GCNeighbourhood of the end of one of
	// the LookupGCCycles GC cycles that ran while the step's lookups did:
	// a step whose tail is its GC cycles has most of its slow lookups
	// near one.
	SlowLookups    int `json:"slow_lookups"`
	SlowNearGC     int `json:"slow_near_gc"`
	LookupGCCycles int `json:"lookup_gc_cycles"`
}

// LookupWindow is the span of one WindowP99Ms entry.
const LookupWindow = 10 * time.Second

// IndexerRateReport is a paced indexer run: one point per event rate.
type IndexerRateReport struct {
	Trace          string  `json:"trace"`
	Workers        int     `json:"workers"`
	BlockSize      int     `json:"block_size"`
	CapacityBlocks int     `json:"capacity_blocks"`
	Shards         int     `json:"shards"`
	GOMAXPROCS     int     `json:"gomaxprocs"`
	LookupRate     float64 `json:"lookup_rate"`
	StepSeconds    float64 `json:"step_seconds"`
	WarmupSeconds  float64 `json:"warmup_seconds"`
	FullRoute      bool    `json:"full_route"`
	// StatusEverySeconds > 0: each step asked for the router's status at
	// that interval (with the index digest when StatusDigest).
	StatusEverySeconds float64 `json:"status_every_seconds,omitempty"`
	StatusDigest       bool    `json:"status_digest,omitempty"`
	// DumpEverySeconds > 0: each step dumped the index at that interval.
	DumpEverySeconds float64 `json:"dump_every_seconds,omitempty"`
	// GCPercent and MemoryLimit are the process's GC settings (the
	// router's defaults unless GOGC/GOMEMLIMIT or the flags changed them;
	// 0 = no limit).
	GCPercent   int   `json:"gc_percent"`
	MemoryLimit int64 `json:"memory_limit"`
	// Warm is the unreported first pass at the highest rate, when asked
	// for: a fresh process faults its heap in on that pass, which a
	// router that has been running does not.
	Warm *IndexerRatePoint `json:"warm,omitempty"`
	// Steady runs fill the index once (FillEvents, applied unpaced in
	// FillSeconds, leaving FilledBlocks entries) and never clear it.
	Steady       bool               `json:"steady"`
	FillEvents   int                `json:"fill_events,omitempty"`
	FillSeconds  float64            `json:"fill_seconds,omitempty"`
	FilledBlocks uint64             `json:"filled_blocks,omitempty"`
	Points       []IndexerRatePoint `json:"points"`
}

// WriteText prints the report as a table, one row per rate.
func (r IndexerRateReport) WriteText(w io.Writer) {
	what := "lookups (hash + every shard's FindMatches + merge)"
	if r.FullRoute {
		what = "whole routing decisions"
	}
	fmt.Fprintf(w, "%s: %d workers, block %d, %d shards (GOMAXPROCS %d), %.0f %s/s open loop, %.0fs per rate (first %.0fs of lookups not counted)\n",
		r.Trace, r.Workers, r.BlockSize, r.Shards, r.GOMAXPROCS, r.LookupRate, what, r.StepSeconds, r.WarmupSeconds)
	limit := "none"
	if r.MemoryLimit > 0 {
		limit = fmt.Sprintf("%d MiB", r.MemoryLimit>>20)
	}
	gc := "runtime's"
	if r.GCPercent > 0 {
		gc = fmt.Sprint(r.GCPercent)
	}
	fmt.Fprintf(w, "GC target %s, memory limit %s\n", gc, limit)
	if r.StatusEverySeconds > 0 {
		with := "without"
		if r.StatusDigest {
			with = "with"
		}
		fmt.Fprintf(w, "router status asked every %gs during each step, %s the index digest\n", r.StatusEverySeconds, with)
	}
	if r.DumpEverySeconds > 0 {
		fmt.Fprintf(w, "index dumped (as for a snapshot) every %gs during each step\n", r.DumpEverySeconds)
	}
	if r.Steady {
		fmt.Fprintf(w, "steady state: %d events filled the index to %d entries in %.1fs before the first step; each step goes on from the last, never clearing it\n",
			r.FillEvents, r.FilledBlocks, r.FillSeconds)
	} else {
		fmt.Fprintln(w, "each step starts from an emptied index (a fill); --steady measures a full one")
	}
	fmt.Fprintf(w, "%-10s %-10s %-7s %-8s %-9s %-9s %-8s %-8s %-8s %-8s %-9s %-8s %-9s %-8s %-4s %-7s %-10s %-10s %s\n",
		"target/s", "events/s", "kept-up", "dropped", "backlog", "drain-ms", "lookups", "p50-ms", "p99-ms", "p999-ms", "sched-p99", "partial", "blocks", "rejected", "gc", "gc-cpu%", "alloc-MB/s", "gc-every-s", "errors/late")
	row := func(p IndexerRatePoint, note string) {
		fmt.Fprintf(w, "%-10.0f %-10.0f %-7s %-8d %-9d %-9.1f %-8d %-8.3f %-8.3f %-8.3f %-9.3f %-8d %-9d %-8d %-4d %-7.1f %-10.1f %-10.1f %d/%d%s\n",
			p.TargetEventsPerSec, p.EventsPerSec, yesNo(p.KeptUp), p.DroppedEvents, p.MaxBacklog, p.DrainMs,
			p.Lookups, p.LookupMs.P50, p.LookupMs.P99, p.LookupMs.P999, p.SchedP99Ms, p.PartialLookups,
			p.IndexedBlocks, p.RejectedEvents, p.GCCycles, 100*p.GCShare, p.AllocMBPerSec, p.GCEverySec,
			p.LookupErrors, p.LateLookups, note)
	}
	if r.Warm != nil {
		row(*r.Warm, "  (warm-up pass of a fresh process, not a result)")
	}
	for _, p := range r.Points {
		row(p, "")
	}
	for _, p := range r.Points {
		if len(p.WindowP99Ms) == 0 {
			continue
		}
		fmt.Fprintf(w, "%.0f events/s: lookup p99 (ms) by %v window:", p.TargetEventsPerSec, LookupWindow)
		for _, v := range p.WindowP99Ms {
			fmt.Fprintf(w, " %.2f", v)
		}
		fmt.Fprintln(w)
	}
	for _, p := range r.Points {
		fmt.Fprintf(w, "%.0f events/s: %d of %d lookups over %v, %d of them within %v of one of the %d GC cycles that ran meanwhile\n",
			p.TargetEventsPerSec, p.SlowLookups, p.Lookups, DynamoLookupP99, p.SlowNearGC, GCNeighbourhood, p.LookupGCCycles)
	}
	fmt.Fprintf(w, "Dynamo's branch-sharded indexer: lookup p99 %v at 30k+ events/s (7,000 workers)\n", DynamoLookupP99)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}
