package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// WorkloadOptions is a workload as the command line describes it.
type WorkloadOptions struct {
	Kind         string
	SharedPrefix SharedPrefixConfig
	MultiTurn    MultiTurnConfig
	Random       RandomConfig
	Chat         ChatConfig
	// TracePath and TimeScale describe a Mooncake replay; TimeScale
	// divides the trace's timestamps when no QPS is asked for.
	TracePath string
	TimeScale float64
	// Requests per point; when 0, Duration x QPS (synthetic workloads) or
	// the whole trace (Mooncake). A Mooncake replay of fewer lines than
	// the trace replays the window Seed picks (TraceWindowStart).
	Requests int
	Duration time.Duration
	Seed     uint64
}

// ParseQPSList parses "1,2.5,4" into positive rates.
func ParseQPSList(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		q, err := strconv.ParseFloat(f, 64)
		if err != nil || !(q > 0) || math.IsInf(q, 0) {
			return nil, fmt.Errorf("%w: qps %q is not a positive number", ErrBadWorkload, f)
		}
		out = append(out, q)
	}
	return out, nil
}

// Build returns the schedule function of the workload and, for a trace
// replay given no QPS list, the single QPS point its time scale offers.
// qps is the requested list (possibly empty for Mooncake).
func (o WorkloadOptions) Build(qps []float64) (ScheduleFunc, []float64, error) {
	if o.Requests < 0 {
		return nil, nil, fmt.Errorf("%w: requests must be >= 0, got %d", ErrBadWorkload, o.Requests)
	}
	if o.Kind == WorkloadMooncake {
		return o.traceSchedule(qps)
	}
	if len(qps) == 0 {
		return nil, nil, fmt.Errorf("%w: workload %s needs at least one qps point", ErrBadWorkload, o.Kind)
	}
	if o.Requests == 0 && o.Duration <= 0 {
		return nil, nil, fmt.Errorf("%w: give a request count or a duration", ErrBadWorkload)
	}
	var gen func(n int) ([]Prompt, error)
	switch o.Kind {
	case WorkloadSharedPrefix:
		gen = func(n int) ([]Prompt, error) { return SharedPrefixPrompts(o.SharedPrefix, n, o.Seed) }
	case WorkloadMultiTurn:
		gen = func(n int) ([]Prompt, error) { return MultiTurnPrompts(o.MultiTurn, n, o.Seed) }
	case WorkloadRandom:
		gen = func(n int) ([]Prompt, error) { return RandomPrompts(o.Random, n, o.Seed) }
	case WorkloadChat:
		gen = func(n int) ([]Prompt, error) { return ChatPrompts(o.Chat, n, o.Seed) }
	default:
		return nil, nil, fmt.Errorf("%w: unknown workload %q (want %s, %s, %s, %s or %s)", ErrBadWorkload,
			o.Kind, WorkloadSharedPrefix, WorkloadMultiTurn, WorkloadRandom, WorkloadMooncake, WorkloadChat)
	}
	schedule := func(q float64) ([]Request, error) {
		n := o.Requests
		if n == 0 {
			n = max(1, int(math.Ceil(o.Duration.Seconds()*q)))
		}
		prompts, err := gen(n)
		if err != nil {
			return nil, err
		}
		return PoissonSchedule(prompts, q, o.Seed)
	}
	return schedule, qps, nil
}

func (o WorkloadOptions) traceSchedule(qps []float64) (ScheduleFunc, []float64, error) {
	all, err := LoadTrace(o.TracePath, 0)
	if err != nil {
		return nil, nil, err
	}
	first, err := TraceWindowStart(o.Seed, o.Requests, len(all))
	if err != nil {
		return nil, nil, err
	}
	recs := all[first:]
	if o.Requests > 0 {
		recs = recs[:min(o.Requests, len(recs))]
	}
	native := TraceQPS(recs)
	if native <= 0 {
		return nil, nil, fmt.Errorf("%w: the trace needs at least two requests at different times", ErrBadWorkload)
	}
	if len(qps) == 0 {
		if !(o.TimeScale > 0) {
			return nil, nil, fmt.Errorf("%w: time scale must be > 0, got %v", ErrBadWorkload, o.TimeScale)
		}
		qps = []float64{native * o.TimeScale}
	}
	schedule := func(q float64) ([]Request, error) { return TraceRequests(recs, q/native) }
	return schedule, qps, nil
}

// TraceWindowStart is the first trace line (from 0) a replay of
// requests lines out of total starts at: the seed picks the window, seed
// 1 the first requests lines, seed 2 the next requests lines, and so on,
// wrapping around over the total-requests+1 starts a whole window can
// have (so every window is contiguous and full). A replay of the whole
// trace (requests 0 or at least total) has one window, and a seed other
// than 1 is refused rather than silently changing nothing. Seed 0 counts
// as 1.
func TraceWindowStart(seed uint64, requests, total int) (int, error) {
	seed = max(seed, 1)
	if requests <= 0 || requests >= total {
		if seed != 1 {
			return 0, fmt.Errorf("%w: mooncake: the seed picks a window of --requests trace lines; replaying the whole trace (%d lines, --requests %d) there is only one, so --seed %d would change nothing (give --requests below %d)",
				ErrBadWorkload, total, requests, seed, total)
		}
		return 0, nil
	}
	starts := uint64(total - requests + 1)
	return int(((seed - 1) % starts) * uint64(requests) % starts), nil
}

// TraceQPS is the request rate of a trace at its own pace.
func TraceQPS(recs []TraceRecord) float64 {
	if len(recs) < 2 {
		return 0
	}
	lo, hi := recs[0].TimestampMs, recs[0].TimestampMs
	for _, r := range recs {
		lo, hi = min(lo, r.TimestampMs), max(hi, r.TimestampMs)
	}
	if hi == lo {
		return 0
	}
	return float64(len(recs)-1) / (float64(hi-lo) / 1000)
}
