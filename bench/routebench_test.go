package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSLOJudge(t *testing.T) {
	slo := SLO{MaxP99: 10 * time.Millisecond, MaxErrorRate: 0.01, MinAchieved: 0.95}
	good := RouteStep{OfferedRate: 1000, AchievedRate: 990, Scheduled: 1000, OK: 995, Failed: 5, LatencyMs: LatencyMs{P99: 9.9}}
	if ok, why := slo.Judge(good); !ok {
		t.Fatalf("a step within every bound missed: %s", why)
	}
	for _, c := range []struct {
		mut  func(*RouteStep)
		want string
	}{
		{func(s *RouteStep) { s.LatencyMs.P99 = 10.5 }, "p99 10.5ms > 10.0ms"},
		{func(s *RouteStep) { s.Failed = 11 }, "errors 1.10% > 1.00%"},
		{func(s *RouteStep) { s.AchievedRate = 900 }, "achieved 90% of offered"},
		{func(s *RouteStep) { s.OK = 0 }, "no successful decision"},
	} {
		st := good
		c.mut(&st)
		ok, why := slo.Judge(st)
		if ok || !strings.Contains(why, c.want) {
			t.Errorf("verdict %v %q, want a miss mentioning %q", ok, why, c.want)
		}
	}
	// No p99 bound: only errors and throughput count.
	slow := good
	slow.LatencyMs.P99 = 500
	if ok, why := (SLO{MaxErrorRate: 0.01, MinAchieved: 0.95}).Judge(slow); !ok {
		t.Errorf("unbounded p99 judged: %s", why)
	}
}

func TestSLOValidate(t *testing.T) {
	for _, s := range []SLO{{MaxP99: -1}, {MaxErrorRate: 1.5}, {MaxErrorRate: -0.1}, {MinAchieved: 2}} {
		if s.Validate() == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if err := (SLO{MaxP99: time.Millisecond, MaxErrorRate: 0.001, MinAchieved: 0.95}).Validate(); err != nil {
		t.Error(err)
	}
}

// runSearch drives a search against a target that sustains up to
// capacity and returns the rates it tried.
func runSearch(t *testing.T, m *MaxSearch, capacity float64) []float64 {
	t.Helper()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	var tried []float64
	for {
		r, ok := m.Next()
		if !ok {
			return tried
		}
		if len(tried) > 50 {
			t.Fatalf("search does not end: %v", tried)
		}
		tried = append(tried, r)
		m.Record(r, r <= capacity)
	}
}

func TestMaxSearch(t *testing.T) {
	for _, c := range []struct {
		name     string
		search   MaxSearch
		capacity float64
		tried    []float64
		best     float64
	}{
		{"grow then bisect", MaxSearch{Start: 1000, Factor: 2, Limit: 1e6, Refine: 2}, 5000,
			[]float64{1000, 2000, 4000, 8000, 6000, 5000}, 5000},
		{"no refinement", MaxSearch{Start: 1000, Factor: 2, Limit: 1e6}, 5000,
			[]float64{1000, 2000, 4000, 8000}, 4000},
		{"stops at the limit", MaxSearch{Start: 1000, Factor: 2, Limit: 5000, Refine: 3}, 1e9,
			[]float64{1000, 2000, 4000, 5000}, 5000},
		{"the start rate already fails", MaxSearch{Start: 1000, Factor: 2, Limit: 1e6, Refine: 2}, 300,
			[]float64{1000, 500, 250}, 250},
		{"bisection stops when the bracket is narrow", MaxSearch{Start: 1000, Factor: 1.01, Limit: 1e6, Refine: 5}, 1005,
			[]float64{1000, 1010}, 1000},
	} {
		m := c.search
		tried := runSearch(t, &m, c.capacity)
		if !equalRates(tried, c.tried) || m.Best() != c.best {
			t.Errorf("%s: tried %v best %v, want %v best %v", c.name, tried, m.Best(), c.tried, c.best)
		}
	}
}

func equalRates(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMaxSearchValidate(t *testing.T) {
	for _, m := range []MaxSearch{
		{Start: 0, Factor: 2, Limit: 10},
		{Start: 10, Factor: 1, Limit: 100},
		{Start: 10, Factor: 2, Limit: 5},
		{Start: 10, Factor: 2, Limit: 100, Refine: -1},
	} {
		if m.Validate() == nil {
			t.Errorf("%+v accepted", m)
		}
	}
}

func TestWriteRouteStep(t *testing.T) {
	st := RouteStep{OfferedRate: 4000, AchievedRate: 3100, SentRate: 3990, Failed: 12,
		Errors: map[string]int{"route 429": 2, ClassTimeout: 10}, LatencyMs: LatencyMs{P50: 0.5, P99: 25}, Why: "p99 25.0ms > 10.0ms",
		FirstError: "route: status 429: overloaded"}
	var b bytes.Buffer
	WriteRouteStepHeader(&b)
	WriteRouteStep(&b, st)
	out := b.String()
	for _, want := range []string{"offered/s", "p99.9", "4000", "3100", "0.50ms", "25.0ms", "MISSED: p99 25.0ms > 10.0ms",
		"failed by kind: timeout: 10, route 429: 2", "first error: route: status 429"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestNewRouteStep(t *testing.T) {
	r := OpenLoopResult{Offered: 100, Window: 2 * time.Second, Elapsed: 2 * time.Second, Scheduled: 200, Sent: 199, Late: 3, OK: 190,
		Errors:  map[string]int{"route 503": 9, ClassDropped: 1},
		Latency: []time.Duration{time.Millisecond, 3 * time.Millisecond}}
	st := NewRouteStep(r)
	if st.AchievedRate != 95 || st.SentRate != 99.5 || st.Failed != 10 || st.Late != 3 || st.LatencyMs.Max != 3 {
		t.Errorf("step %+v", st)
	}
}
