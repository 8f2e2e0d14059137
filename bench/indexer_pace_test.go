package bench

import (
	"bytes"
	"errors"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEventPaceValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		pace EventPace
		ok   bool
	}{
		{"rate", EventPace{Rate: 30000}, true},
		{"speedup", EventPace{Speedup: 100}, true},
		{"neither", EventPace{}, false},
		{"both", EventPace{Rate: 1, Speedup: 1}, false},
		{"negative rate", EventPace{Rate: -5}, false},
		{"negative speedup", EventPace{Speedup: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.pace.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadIndexerPlan) {
				t.Fatalf("error %v is not ErrBadIndexerPlan", err)
			}
		})
	}
}

// Three requests at trace times 0, 1 s and 2 s; the middle one has two
// events (a removal and a store) sharing its time.
func paceFixture() []pacedEvent {
	return []pacedEvent{
		{req: 0, traceAt: 0},
		{req: 1, traceAt: time.Second},
		{req: 1, traceAt: time.Second},
		{req: 2, traceAt: 2 * time.Second},
	}
}

func TestDueTimes(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		pace EventPace
		span time.Duration
		want []time.Duration
	}{
		{"rate spaces events evenly", EventPace{Rate: 1000}, time.Second, []time.Duration{0, ms, 2 * ms, 3 * ms}},
		{"rate stops at the span", EventPace{Rate: 2}, time.Second, []time.Duration{0, 500 * ms}},
		{"speedup keeps the trace's gaps, shorter", EventPace{Speedup: 10}, time.Second, []time.Duration{0, 100 * ms, 100 * ms, 200 * ms}},
		{"speedup stops at the span", EventPace{Speedup: 1}, 1500 * ms, []time.Duration{0, time.Second, time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.pace.dueTimes(paceFixture(), tc.span)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("dueTimes = %v, want %v", got, tc.want)
			}
		})
	}
	// A steady run's later step starts mid-trace: its first event is due
	// at once, and the trace's gaps follow.
	if got, want := (EventPace{Speedup: 10}).dueTimes(paceFixture()[1:], time.Second), []time.Duration{0, 0, 100 * ms}; !slices.Equal(got, want) {
		t.Fatalf("dueTimes from mid-trace = %v, want %v", got, want)
	}
}

func TestEventsNeeded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		paces []EventPace
		want  int
	}{
		{"highest rate wins", []EventPace{{Rate: 1000}, {Rate: 30000}}, 60000},
		// 2 s at 10x covers 20 s of a 10 s trace: 2 passes, +1 for the
		// partial pass, of 500 events each.
		{"speedup in whole passes", []EventPace{{Speedup: 10}}, 1500},
		{"the larger of both kinds", []EventPace{{Speedup: 10}, {Rate: 100}}, 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eventsNeeded(tc.paces, 2*time.Second, 10*time.Second, 500); got != tc.want {
				t.Fatalf("eventsNeeded = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestLookupRequest(t *testing.T) {
	due := []time.Duration{0, 10, 10, 20}
	reqs := []int{0, 1, 1, 2}
	for _, tc := range []struct {
		name string
		at   time.Duration
		pick int
		want int
	}{
		{"at the first event asks about the next request", 0, 0, 1},
		{"between events follows the last one due", 15, 0, 2},
		{"pick looks further ahead", 15, 3, 5},
		{"past the end wraps around the trace", 20, 7, 0},
		{"before any event is due", -1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lookupRequest(due, reqs, 10, tc.at, tc.pick); got != tc.want {
				t.Fatalf("lookupRequest(%v, %d) = %d, want %d", tc.at, tc.pick, got, tc.want)
			}
		})
	}
}

func TestIngestKeptUp(t *testing.T) {
	for _, tc := range []struct {
		name             string
		target, achieved float64
		dropped          int
		want             bool
	}{
		{"on pace", 30000, 29900, 0, true},
		{"5% short is still on pace", 1000, 950, 0, true},
		{"fell behind", 30000, 21000, 0, false},
		{"dropped events", 30000, 30000, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ingestKeptUp(tc.target, tc.achieved, tc.dropped); got != tc.want {
				t.Fatalf("ingestKeptUp = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSummarizeLookupsSkipsWarmupAndCountsFailures(t *testing.T) {
	ms := time.Millisecond
	rs := []lookupResult{
		{at: 0, latency: 500 * ms}, // warmup: not counted
		{at: time.Second, latency: 2 * ms},
		{at: time.Second + ms, latency: 4 * ms, late: true},
		{at: time.Second + 2*ms, latency: 9 * ms, err: true},
	}
	var pt IndexerRatePoint
	summarizeLookups(&pt, rs, time.Second)
	if pt.Lookups != 3 || pt.LookupErrors != 1 || pt.LateLookups != 1 {
		t.Fatalf("counts: %+v", pt)
	}
	if pt.LookupMs.P50 != 4 || pt.LookupMs.Max != 9 {
		t.Fatalf("latency (a failure's time counts): %+v", pt.LookupMs)
	}
}

func TestHistogramPercentile(t *testing.T) {
	buckets := []float64{0, 0.001, 0.002, 0.004}
	before := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{5, 5, 5}}
	after := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{95, 14, 6}}
	// Added: 90 in [0,1ms), 9 in [1,2ms), 1 in [2,4ms).
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, time.Millisecond}, {99, 2 * time.Millisecond}, {100, 4 * time.Millisecond}} {
		if got := histogramPercentile(before, after, tc.p); got != tc.want {
			t.Fatalf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := histogramPercentile(after, after, 99); got != 0 {
		t.Fatalf("nothing added: %v", got)
	}
}

func TestIndexerRateReportText(t *testing.T) {
	rep := IndexerRateReport{Trace: "t", Workers: 1000, BlockSize: 64, Shards: 2, GOMAXPROCS: 2, LookupRate: 1000,
		StepSeconds: 6, WarmupSeconds: 1, Points: []IndexerRatePoint{
			{TargetEventsPerSec: 10000, EventsPerSec: 9990, KeptUp: true, Lookups: 5000, LookupMs: LatencyMs{P50: 0.4, P99: 1.25, P999: 2}},
			{TargetEventsPerSec: 30000, EventsPerSec: 21000, MaxBacklog: 9000, Lookups: 5000, LookupMs: LatencyMs{P99: 40},
				IndexedBlocks: 123456, RejectedEvents: 7, GCCycles: 3, GCShare: 0.125, AllocMBPerSec: 42.5, GCEverySec: 96.25,
				SlowLookups: 120, SlowNearGC: 90, LookupGCCycles: 2},
		},
		GCPercent: 400, MemoryLimit: 9 << 30, Warm: &IndexerRatePoint{TargetEventsPerSec: 30000, EventsPerSec: 17000}}
	var buf bytes.Buffer
	rep.WriteText(&buf)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 10 || !strings.Contains(lines[1], "GC target 400, memory limit 9216 MiB") || !strings.Contains(lines[2], "emptied index") {
		t.Fatalf("want header, GC line, mode line, columns, warm-up row, 2 rows, 2 slow-lookup lines, footer; got:\n%s", buf.String())
	}
	if want := "30000 events/s: 120 of 5000 lookups over 3.2ms, 90 of them within 250ms of one of the 2 GC cycles"; !strings.HasPrefix(lines[8], want) {
		t.Fatalf("slow-lookup line %q, want it to start %q", lines[8], want)
	}
	for i, want := range [][]string{{"30000", "17000", "(warm-up"}, {"10000", "9990", "yes", "1.250"}, {"30000", "21000", "NO", "9000", "40.000", "123456", "7", "3", "12.5", "42.5", "96.2"}} {
		fields := strings.Fields(lines[4+i])
		for _, w := range want {
			if !slices.Contains(fields, w) {
				t.Fatalf("row %d %q lacks %q", i, lines[4+i], w)
			}
		}
	}
}

func TestIndexerRateConfigValidate(t *testing.T) {
	good := IndexerRateConfig{Plan: IndexerPlanConfig{Workers: 2, BlockSize: 64, CapacityBlocks: 100},
		Paces: []EventPace{{Rate: 100}}, LookupRate: 10, Step: time.Second, Warmup: 0, MaxInFlight: 4}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*IndexerRateConfig){
		"no paces":          func(c *IndexerRateConfig) { c.Paces = nil },
		"bad pace":          func(c *IndexerRateConfig) { c.Paces = []EventPace{{}} },
		"no lookups":        func(c *IndexerRateConfig) { c.LookupRate = 0 },
		"warmup past step":  func(c *IndexerRateConfig) { c.Warmup = c.Step },
		"no in-flight room": func(c *IndexerRateConfig) { c.MaxInFlight = 0 },
		"bad plan":          func(c *IndexerRateConfig) { c.Plan.Workers = 0 },
	} {
		c := good
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, ErrBadIndexerPlan) {
			t.Errorf("%s: Validate() = %v, want ErrBadIndexerPlan", name, err)
		}
	}
}

// A short paced run end to end: every event due is applied, lookups are
// answered, and the report has one point per pace.
func TestRunIndexerRatesSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("replays part of the trace")
	}
	rep, err := RunIndexerRates(t.Context(), IndexerRateConfig{
		Plan:     IndexerPlanConfig{Workers: 4, BlockSize: 64, CapacityBlocks: 2048},
		Requests: 200, Paces: []EventPace{{Rate: 400}, {Speedup: 2000}}, LookupRate: 50,
		Step: 500 * time.Millisecond, Warmup: 100 * time.Millisecond, MaxInFlight: 64,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Points) != 2 {
		t.Fatalf("points: %+v", rep.Points)
	}
	for _, p := range rep.Points {
		if p.Events == 0 || p.DroppedEvents != 0 || p.Lookups == 0 || p.LookupErrors != 0 {
			t.Fatalf("point %+v", p)
		}
	}
	if got := rep.Points[0].Events; got != 200 { // 400/s × 0.5 s
		t.Fatalf("rate step sent %d events, want 200", got)
	}
}

func TestGCBetween(t *testing.T) {
	a := gcSample{cycles: 10, gcCPU: 1, total: 10}
	b := gcSample{cycles: 13, gcCPU: 2, total: 18}
	if cycles, share := gcBetween(a, b); cycles != 3 || share != 0.125 {
		t.Fatalf("gcBetween = %d, %v; want 3 cycles, 1 s of GC in 8 s", cycles, share)
	}
	if _, share := gcBetween(b, b); share != 0 {
		t.Fatalf("no time passed: share %v", share)
	}
	before := readGC()
	runtime.GC()
	if cycles, _ := gcBetween(before, readGC()); cycles < 1 {
		t.Fatalf("a forced collection was not counted: %d cycles", cycles)
	}
}

// A steady run fills the index once and never clears it: every step
// measures a full index, its events continue the plan (no refusals, no
// duplicates of what the fill stored), and the fill is reported.
func TestRunIndexerRatesSteady(t *testing.T) {
	if testing.Short() {
		t.Skip("replays part of the trace")
	}
	const workers, capacity = 4, 512
	before := 0
	rep, err := RunIndexerRates(t.Context(), IndexerRateConfig{
		BeforeSteps: func() error { before++; return nil },
		Plan:        IndexerPlanConfig{Workers: workers, BlockSize: 64, CapacityBlocks: capacity},
		Requests:    200, Paces: []EventPace{{Rate: 400}, {Rate: 400}}, LookupRate: 50,
		Step: 500 * time.Millisecond, Warmup: 100 * time.Millisecond, MaxInFlight: 64, Steady: true,
		StatusEvery: 50 * time.Millisecond, StatusDigest: true, DumpEvery: 100 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	fill := SteadyFill
	full := uint64(fill * workers * capacity)
	if before != 1 {
		t.Fatalf("BeforeSteps ran %d times, want once", before)
	}
	if !rep.Steady || rep.FillEvents == 0 || rep.FilledBlocks < full {
		t.Fatalf("fill: %d events left %d entries, want >= %d", rep.FillEvents, rep.FilledBlocks, full)
	}
	for _, p := range rep.Points {
		if p.Events != 200 || p.DroppedEvents != 0 || p.RejectedEvents != 0 || p.IndexedBlocks < full || p.LookupErrors != 0 || p.StatusCalls == 0 || p.Dumps == 0 {
			t.Fatalf("steady point %+v", p)
		}
	}
}

func TestGCInterval(t *testing.T) {
	a := gcSample{allocated: 1 << 30}
	b := gcSample{allocated: 1<<30 + 100<<20, live: 1 << 30, goal: 5 << 30}
	rate, every := gcInterval(a, b, 2*time.Second)
	if rate != 50<<20 || every != float64(4<<30)/float64(50<<20) {
		t.Fatalf("gcInterval = %v B/s, every %v s; want 50 MiB/s, every 81.92 s", rate, every)
	}
	if rate, every := gcInterval(b, b, time.Second); rate != 0 || every != 0 {
		t.Fatalf("nothing allocated: %v, %v", rate, every)
	}
}

// Lookups are grouped by scheduled time into LookupWindow windows after
// the warm-up; a slow second shows in its own window only, and a step
// shorter than three windows reports none.
func TestWindowP99(t *testing.T) {
	var rs []lookupResult
	for i := range 300 {
		at := time.Second + time.Duration(i)*100*time.Millisecond // 30 s of lookups after a 1 s warm-up
		lat := time.Millisecond
		if i >= 150 && i < 160 { // one slow second in the second half of window 1
			lat = 50 * time.Millisecond
		}
		rs = append(rs, lookupResult{at: at, latency: lat})
	}
	rs = append(rs, lookupResult{at: 0, latency: time.Second}) // warm-up: not counted
	got := windowP99(rs, time.Second)
	want := []float64{1, 50, 1}
	if len(got) != len(want) {
		t.Fatalf("windows %v, want %v", got, want)
	}
	for k := range want {
		if got[k] != want[k] {
			t.Fatalf("windows %v, want %v", got, want)
		}
	}
	if w := windowP99(rs[:150], time.Second); w != nil {
		t.Fatalf("a 15 s step has no window breakdown, got %v", w)
	}
}

func TestSlowLookupsNearGC(t *testing.T) {
	start := time.Unix(1000, 0)
	gcAt := []time.Time{start.Add(5 * time.Second), start.Add(9 * time.Second)}
	ms := time.Millisecond
	rs := []lookupResult{
		{at: 500 * ms, latency: time.Second},                    // warm-up: not counted, though slow
		{at: 2 * time.Second, latency: 3200 * time.Microsecond}, // at the limit: not slow
		{at: 2 * time.Second, latency: 4 * ms},                  // slow, 3 s from any cycle
		{at: 5*time.Second - 260*ms, latency: 5 * ms},           // ends 255 ms before a cycle: not near
		{at: 5*time.Second - 250*ms, latency: 5 * ms},           // ends 245 ms before it: near
		{at: 4 * time.Second, latency: 2 * time.Second},         // spans a cycle: near
		{at: 9*time.Second + 250*ms, latency: 4 * ms},           // starts 250 ms after one: near
		{at: 9*time.Second + 251*ms, latency: 4 * ms},           // 251 ms after: not near
		{at: 9 * time.Second, latency: time.Millisecond},        // at a cycle but fast
	}
	slow, near := slowLookups(rs, start, time.Second, DynamoLookupP99, GCNeighbourhood, gcAt)
	if slow != 6 || near != 3 {
		t.Fatalf("slow %d near a GC %d, want 6 and 3", slow, near)
	}
	if slow, near := slowLookups(rs, start, time.Second, DynamoLookupP99, GCNeighbourhood, nil); slow != 6 || near != 0 {
		t.Fatalf("with no cycles: slow %d near %d, want 6 and 0", slow, near)
	}
}

func TestGCPausesSince(t *testing.T) {
	before := time.Now()
	runtime.GC()
	runtime.GC()
	got := gcPausesSince(before)
	if len(got) < 2 {
		t.Fatalf("two forced cycles after %v, got %d pause ends: %v", before, len(got), got)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Before(got[i-1]) {
			t.Fatalf("pause ends not oldest first: %v", got)
		}
	}
	if after := gcPausesSince(time.Now().Add(time.Hour)); len(after) != 0 {
		t.Fatalf("no cycle ends in the future, got %v", after)
	}
}
