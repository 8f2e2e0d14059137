package bench

import (
	"fmt"
	"maps"
	"slices"
)

// Span is the lowest and highest value a metric took over a point's runs.
type Span struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// Ranges are the spans of a repeated point's metrics over its runs; the
// point's own fields are the medians.
type Ranges struct {
	HitRate        Span `json:"hit_rate"`
	TTFTP50        Span `json:"ttft_p50_ms"`
	TTFTP90        Span `json:"ttft_p90_ms"`
	TTFTP99        Span `json:"ttft_p99_ms"`
	ITLP50         Span `json:"itl_p50_ms"`
	ITLP90         Span `json:"itl_p90_ms"`
	ThroughputTokS Span `json:"throughput_tok_s"`
	LoadSpread     Span `json:"load_spread"`
}

// pointMetric is one measured figure of a Point and its span in Ranges.
type pointMetric struct {
	value func(*Point) *float64
	span  func(*Ranges) *Span
}

// pointMetrics lists every figure a repeated point reports as a median
// and a range.
var pointMetrics = []pointMetric{
	{func(p *Point) *float64 { return &p.HitRate }, func(r *Ranges) *Span { return &r.HitRate }},
	{func(p *Point) *float64 { return &p.TTFTP50 }, func(r *Ranges) *Span { return &r.TTFTP50 }},
	{func(p *Point) *float64 { return &p.TTFTP90 }, func(r *Ranges) *Span { return &r.TTFTP90 }},
	{func(p *Point) *float64 { return &p.TTFTP99 }, func(r *Ranges) *Span { return &r.TTFTP99 }},
	{func(p *Point) *float64 { return &p.ITLP50 }, func(r *Ranges) *Span { return &r.ITLP50 }},
	{func(p *Point) *float64 { return &p.ITLP90 }, func(r *Ranges) *Span { return &r.ITLP90 }},
	{func(p *Point) *float64 { return &p.ThroughputTokS }, func(r *Ranges) *Span { return &r.ThroughputTokS }},
	{func(p *Point) *float64 { return &p.LoadSpread }, func(r *Ranges) *Span { return &r.LoadSpread }},
}

// MedianPoint merges the runs of one (policy, QPS) point: every figure
// is the median over the runs (the mean of the middle two for an even
// count; each figure's median on its own, so two medians may come from
// different runs) with its range in Range; errors, failure-detector
// counts and prefill paths are summed. Name, QPS and Bounds come from
// the first run.
func MedianPoint(runs []Point) (Point, error) {
	if len(runs) == 0 {
		return Point{}, fmt.Errorf("%w: no runs to merge", ErrBadWorkload)
	}
	out := runs[0]
	out.Runs = len(runs)
	out.Errors = 0
	out.Detector = nil
	out.DisaggPaths = nil
	rng := &Ranges{}
	vals := make([]float64, len(runs))
	for _, m := range pointMetrics {
		for i := range runs {
			vals[i] = *m.value(&runs[i])
		}
		*m.value(&out) = Percentile(vals, 50)
		*m.span(rng) = Span{Min: slices.Min(vals), Max: slices.Max(vals)}
	}
	for _, r := range runs {
		if r.Name != out.Name || r.QPS != out.QPS {
			return Point{}, fmt.Errorf("%w: runs of %s at %g mixed with %s at %g", ErrBadWorkload, out.Name, out.QPS, r.Name, r.QPS)
		}
		out.Errors += r.Errors
		if r.Detector != nil {
			sum := r.Detector.Add(DetectorCounts{})
			if out.Detector != nil {
				sum = sum.Add(*out.Detector)
			}
			out.Detector = &sum
		}
		for _, k := range slices.Sorted(maps.Keys(r.DisaggPaths)) {
			if out.DisaggPaths == nil {
				out.DisaggPaths = map[string]uint64{}
			}
			out.DisaggPaths[k] += r.DisaggPaths[k]
		}
	}
	if len(runs) > 1 {
		out.Range = rng
	}
	return out, nil
}

// RotatedOrder is the order in which run r (from 0) measures the
// policies: the list rotated left by r, so over len(policies) runs each
// policy goes first once and a policy is not always measured on a
// machine warmed (or tired) by the same predecessor.
func RotatedOrder(policies []string, r int) []string {
	n := len(policies)
	if n == 0 {
		return nil
	}
	k := r % n
	return append(slices.Clone(policies[k:]), policies[:k]...)
}
