package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SLO is what a step of a rate sweep must meet to count as sustained.
type SLO struct {
	// MaxP99 bounds the decisions' p99 latency (0 = no bound).
	MaxP99 time.Duration `json:"max_p99_ns"`
	// MaxErrorRate bounds failed (dropped included) over scheduled
	// requests.
	MaxErrorRate float64 `json:"max_error_rate"`
	// MinAchieved bounds achieved over offered decisions/s.
	MinAchieved float64 `json:"min_achieved_ratio"`
}

// Validate reports an unusable bound.
func (s SLO) Validate() error {
	switch {
	case s.MaxP99 < 0:
		return fmt.Errorf("p99 bound must not be negative, got %v", s.MaxP99)
	case !(s.MaxErrorRate >= 0 && s.MaxErrorRate <= 1):
		return fmt.Errorf("error-rate bound must be in 0..1, got %v", s.MaxErrorRate)
	case !(s.MinAchieved >= 0 && s.MinAchieved <= 1):
		return fmt.Errorf("achieved-ratio bound must be in 0..1, got %v", s.MinAchieved)
	}
	return nil
}

// Judge says whether a step met the SLO and, if not, why.
func (s SLO) Judge(st RouteStep) (bool, string) {
	var why []string
	if st.Scheduled > 0 {
		if rate := float64(st.Failed) / float64(st.Scheduled); rate > s.MaxErrorRate {
			why = append(why, fmt.Sprintf("errors %.2f%% > %.2f%%", 100*rate, 100*s.MaxErrorRate))
		}
	}
	if st.OK == 0 {
		why = append(why, "no successful decision")
	} else if s.MaxP99 > 0 && st.LatencyMs.P99 > float64(s.MaxP99)/float64(time.Millisecond) {
		why = append(why, fmt.Sprintf("p99 %s > %s", fmtMs(st.LatencyMs.P99), fmtMs(float64(s.MaxP99)/float64(time.Millisecond))))
	}
	if st.OfferedRate > 0 && st.AchievedRate < s.MinAchieved*st.OfferedRate {
		why = append(why, fmt.Sprintf("achieved %.0f%% of offered < %.0f%%", 100*st.AchievedRate/st.OfferedRate, 100*s.MinAchieved))
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// RouteStep is one rate of an HTTP routing benchmark, as reported.
type RouteStep struct {
	// API is the API the step went through (APIJSON, APIGRPC,
	// APIGRPCStream); Phase names a step measured at a fraction of the
	// API's max ("50% of max"), empty for the search's or list's steps.
	API          string         `json:"api,omitempty"`
	Phase        string         `json:"phase,omitempty"`
	OfferedRate  float64        `json:"offered_rate"`
	AchievedRate float64        `json:"achieved_rate"`
	SentRate     float64        `json:"sent_rate"`
	DurationS    float64        `json:"duration_s"`
	ElapsedS     float64        `json:"elapsed_s"`
	Scheduled    int            `json:"scheduled"`
	Sent         int            `json:"sent"`
	Late         int            `json:"late"`
	OK           int            `json:"ok"`
	Failed       int            `json:"failed"`
	Errors       map[string]int `json:"errors"`
	// LatencyMs is measured from each request's intended send time to
	// its /route answer.
	LatencyMs LatencyMs `json:"latency_ms"`
	// SendLagMs is how late the generator started requests.
	SendLagMs LatencyMs `json:"send_lag_ms"`
	// ProcessCores is the CPU the kvbench process used, in cores (with
	// an in-process router, the router's CPU is part of it).
	ProcessCores float64 `json:"process_cpu_cores"`
	// RouterCPUPerDecision is the router process's CPU per request sent
	// (warm-up included), in µs, when its pid was given.
	RouterCPUPerDecision float64 `json:"router_cpu_us_per_decision,omitempty"`
	RouterCores          float64 `json:"router_cpu_cores,omitempty"`
	Pass                 bool    `json:"meets_slo"`
	Why                  string  `json:"slo_miss,omitempty"`
	FirstError           string  `json:"first_error,omitempty"`
}

// NewRouteStep summarises an open-loop result.
func NewRouteStep(r OpenLoopResult) RouteStep {
	return RouteStep{
		OfferedRate: r.Offered, AchievedRate: r.Achieved(), SentRate: r.SentRate(),
		DurationS: r.Window.Seconds(), ElapsedS: r.Elapsed.Seconds(),
		Scheduled: r.Scheduled, Sent: r.Sent, Late: r.Late, OK: r.OK, Failed: r.Failed(), Errors: r.Errors,
		LatencyMs: SummarizeLatency(r.Latency), SendLagMs: SummarizeLatency(r.SendLag),
	}
}

// RouteBenchReport is `kvbench http`'s JSON report.
type RouteBenchReport struct {
	Command     string      `json:"command"`
	Target      string      `json:"target"`
	Decision    string      `json:"decision"`
	Latency     string      `json:"latency"`
	Workers     int         `json:"workers"`
	Tokens      int         `json:"tokens"`
	Prefix      string      `json:"prefix"`
	MaxInFlight int         `json:"max_in_flight"`
	WarmupS     float64     `json:"warmup_s"`
	GOMAXPROCS  int         `json:"gomaxprocs"`
	NumCPU      int         `json:"num_cpu"`
	GoVersion   string      `json:"go_version"`
	Started     time.Time   `json:"started"`
	Setup       RouteSetup  `json:"setup"`
	SLO         SLO         `json:"slo"`
	Steps       []RouteStep `json:"steps"`
	// MaxSustained is the highest offered rate that met the SLO (0 when
	// none did); set by sweeps.
	MaxSustained float64 `json:"max_sustained_rate,omitempty"`
	// APIs measured in turn, and each one's max sustained rate.
	APIs              []string           `json:"apis,omitempty"`
	MaxSustainedByAPI map[string]float64 `json:"max_sustained_rate_by_api,omitempty"`
}

func fmtMs(ms float64) string {
	switch {
	case ms >= 100:
		return strconv.FormatFloat(ms, 'f', 0, 64) + "ms"
	case ms >= 10:
		return strconv.FormatFloat(ms, 'f', 1, 64) + "ms"
	default:
		return strconv.FormatFloat(ms, 'f', 2, 64) + "ms"
	}
}

// WriteRouteStepHeader prints the column names of WriteRouteStep.
func WriteRouteStepHeader(w io.Writer) {
	fmt.Fprintf(w, "%9s %10s %9s %9s %9s %9s %9s %9s %9s %7s %7s %6s  %s\n",
		"offered/s", "achieved/s", "sent/s", "p50", "p90", "p99", "p99.9", "max", "lag p99", "late", "failed", "cores", "SLO")
}

// WriteRouteStep prints one step as a table row, and its failures by
// kind under it.
func WriteRouteStep(w io.Writer, st RouteStep) {
	verdict := "ok"
	if !st.Pass {
		verdict = "MISSED: " + st.Why
	}
	l := st.LatencyMs
	fmt.Fprintf(w, "%9.0f %10.0f %9.0f %9s %9s %9s %9s %9s %9s %7d %7d %6.2f  %s\n",
		st.OfferedRate, st.AchievedRate, st.SentRate, fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.P999), fmtMs(l.Max),
		fmtMs(st.SendLagMs.P99), st.Late, st.Failed, st.ProcessCores, verdict)
	if st.RouterCPUPerDecision > 0 {
		fmt.Fprintf(w, "%9s router process: %.1f cpu-µs per decision, %.2f cores\n", "", st.RouterCPUPerDecision, st.RouterCores)
	}
	if len(st.Errors) > 0 {
		fmt.Fprintf(w, "%9s failed by kind: %s\n", "", FormatErrorCounts(st.Errors))
		if st.FirstError != "" {
			fmt.Fprintf(w, "%9s first error: %s\n", "", st.FirstError)
		}
	}
}

// FormatErrorCounts lists counts by kind, the most frequent first.
func FormatErrorCounts(m map[string]int) string {
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// MaxSearch chooses the rates of a search for the highest sustained rate:
// it multiplies the rate by Factor from Start while steps meet the SLO
// (up to Limit), then bisects Refine times between the best passing and
// the lowest failing rate.
type MaxSearch struct {
	Start, Factor, Limit float64
	Refine               int

	last     float64
	lo, hi   float64 // best passing, lowest failing (0 = none yet)
	refined  int
	finished bool
}

// Validate reports unusable search parameters.
func (m *MaxSearch) Validate() error {
	switch {
	case !(m.Start > 0) || math.IsInf(m.Start, 0):
		return fmt.Errorf("start rate must be a positive number, got %v", m.Start)
	case !(m.Factor > 1) || math.IsInf(m.Factor, 0):
		return fmt.Errorf("step factor must be greater than 1, got %v", m.Factor)
	case !(m.Limit >= m.Start) || math.IsInf(m.Limit, 0):
		return fmt.Errorf("rate limit must be at least the start rate %v, got %v", m.Start, m.Limit)
	case m.Refine < 0:
		return fmt.Errorf("refinement steps must not be negative, got %d", m.Refine)
	}
	return nil
}

// Next is the next rate to measure; false when the search is over.
func (m *MaxSearch) Next() (float64, bool) {
	if m.finished {
		return 0, false
	}
	if m.last == 0 {
		return m.Start, true
	}
	if m.hi == 0 {
		if m.last >= m.Limit {
			return 0, m.finish()
		}
		return math.Min(math.Round(m.last*m.Factor), m.Limit), true
	}
	if m.refined >= m.Refine {
		return 0, m.finish()
	}
	mid := math.Round((m.lo + m.hi) / 2)
	if mid <= m.lo || mid >= m.hi || m.hi-m.lo < 0.02*m.hi {
		return 0, m.finish()
	}
	m.refined++
	return mid, true
}

func (m *MaxSearch) finish() bool {
	m.finished = true
	return false
}

// Record feeds a measured rate's verdict back.
func (m *MaxSearch) Record(rate float64, pass bool) {
	m.last = rate
	if pass {
		m.lo = math.Max(m.lo, rate)
	} else if m.hi == 0 || rate < m.hi {
		m.hi = rate
	}
}

// Best is the highest rate that met the SLO (0 = none).
func (m *MaxSearch) Best() float64 { return m.lo }
