package bench

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvrouter/kvrouter/scheduling"
)

// tableLegend explains the rows and columns of WriteTable, printed right
// under it so a reader does not have to look them up.
var tableLegend = []string{
	"rows:    kvrouter = this router with its default cost (--router-cost " + string(scheduling.DefaultRouterCost) + "); kvrouter_dynamo = --router-cost dynamo (Dynamo's cost, bit for bit);",
	"         kvrouter_approx = approximate mode (--use-kv-events=false, Dynamo's cost);",
	"         round_robin, random, least_loaded = baselines that pick an engine without looking at caches; oracle = hit-rate upper bounds",
	"columns: hit_rate = share of prompt tokens served from cache; vs_timed = hit_rate / oracle_timed (1.0 = as good as hindsight);",
	"         oracle_unb / oracle_cap / oracle_timed = best hit rate with hindsight, with an unlimited cache / each engine's real cache /",
	"         real cache and a block counting only once its prefill finished; ttft = time to first token, itl = inter-token latency (ms);",
	"         p90_floor = the p90 prompt's uncached prefill on an idle engine (ms; TTFT p90 with no queueing and no cache hits);",
	"         tok/s = output tokens per second; errors = failed requests (summed over runs); load_spread = busiest engine's KV load / the mean (1 = even);",
	"         with several runs per point, each figure is the median over the runs and [min-max] its range",
}

// WriteLegend prints tableLegend.
func WriteLegend(w io.Writer) {
	for _, l := range tableLegend {
		fmt.Fprintln(w, l)
	}
}

// Summary returns up to three plain sentences on the report: the
// default cost against round-robin at the highest load both ran, the
// default cost against Dynamo's (kvrouter_dynamo) at the highest load
// both ran, and how close each cost came to the oracle over every load. A sentence whose policies
// were not measured is left out.
func (r *Report) Summary() []string {
	at := map[string]map[float64]Point{}
	for _, p := range r.Policies {
		if at[p.Name] == nil {
			at[p.Name] = map[float64]Point{}
		}
		at[p.Name][p.QPS] = p
	}
	// top is the highest load at which both policies were measured.
	top := func(a, b string) (Point, Point, bool) {
		var pa, pb Point
		found := false
		for qps, p := range at[a] {
			if q, ok := at[b][qps]; ok && (!found || qps > pa.QPS) {
				pa, pb, found = p, q, true
			}
		}
		return pa, pb, found
	}
	var out []string
	if kv, rr, ok := top(PolicyKVRouter, PolicyRoundRobin); ok {
		if s := compare(fmt.Sprintf("kvrouter's default cost (%s)", scheduling.DefaultRouterCost), "round-robin", kv, rr); s != "" {
			out = append(out, s)
		}
	}
	if kv, dy, ok := top(PolicyKVRouter, PolicyKVRouterDynamo); ok {
		if s := compare("the default cost", "Dynamo's cost", kv, dy); s != "" {
			out = append(out, s)
		}
	}
	if s := r.oracleSentence(); s != "" {
		out = append(out, s)
	}
	return out
}

// compare says how many cached tokens and what TTFT p90 a had relative
// to b at the same load. A ratio whose denominator is 0 (round-robin can
// hit nothing) is "n/a"; a repeated point shows its range after each
// median.
func compare(aName, bName string, a, b Point) string {
	runs := ""
	if a.Runs > 1 || b.Runs > 1 {
		runs = fmt.Sprintf(" (medians of %d runs, ranges in brackets)", max(a.Runs, b.Runs))
	}
	ar, br := a.Range, b.Range
	if ar == nil {
		ar = &Ranges{}
	}
	if br == nil {
		br = &Ranges{}
	}
	served := fmt.Sprintf("served %s the cached prompt tokens of %s", timesOrNA(a.HitRate, b.HitRate), bName)
	if b.HitRate == 0 {
		served = fmt.Sprintf("served cached prompt tokens where %s served none (ratio n/a)", bName)
	}
	return fmt.Sprintf("At %g requests/s%s, %s %s (hit rate %s vs %s), with %s its p90 time to first token (%s vs %s ms).",
		a.QPS, runs, aName, served,
		withRange("%.2f", a.HitRate, a.Range, ar.HitRate), withRange("%.2f", b.HitRate, b.Range, br.HitRate),
		timesOrNA(a.TTFTP90, b.TTFTP90), withRange("%.0f", a.TTFTP90, a.Range, ar.TTFTP90), withRange("%.0f", b.TTFTP90, b.Range, br.TTFTP90))
}

// timesOrNA is a/b as times formats it, with an "x", or "n/a" when b is 0.
func timesOrNA(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return times(a/b) + "x"
}

// times formats a ratio the way people say it: 2.4, 0.42.
func times(x float64) string {
	if x >= 1 {
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

// oracleSentence gives the range, over the loads, of each KV-aware
// policy's hit rate as a share of the best placement with hindsight
// (oracle_timed, or oracle_unbounded when the fleet was not described).
func (r *Report) oracleSentence() string {
	bound, boundName := func(p Point) float64 { return p.Timed }, "oracle_timed"
	timed := false
	for _, p := range r.Policies {
		timed = timed || p.Timed > 0
	}
	if !timed {
		bound, boundName = func(p Point) float64 { return p.Unbounded }, "oracle_unbounded"
	}
	type span struct{ lo, hi float64 }
	shares := map[string]*span{}
	loads := map[float64]bool{}
	for _, p := range r.Policies {
		b := bound(p)
		if !IsRouterPolicy(p.Name) || b == 0 {
			continue
		}
		loads[p.QPS] = true
		v := p.HitRate / b
		if s := shares[p.Name]; s == nil {
			shares[p.Name] = &span{v, v}
		} else {
			s.lo, s.hi = min(s.lo, v), max(s.hi, v)
		}
	}
	var parts []string
	labels := map[string]string{PolicyKVRouter: "the default cost", PolicyKVRouterDynamo: "Dynamo's cost", PolicyKVRouterApprox: "approximate mode"}
	for _, name := range []string{PolicyKVRouter, PolicyKVRouterDynamo, PolicyKVRouterApprox} {
		s := shares[name]
		if s == nil {
			continue
		}
		label := labels[name]
		rng := fmt.Sprintf("%.2f", s.lo)
		if fmt.Sprintf("%.2f", s.hi) != rng {
			rng += "-" + fmt.Sprintf("%.2f", s.hi)
		}
		parts = append(parts, fmt.Sprintf("%s reached %s", label, rng))
	}
	if len(parts) == 0 {
		return ""
	}
	where := "at every load"
	if len(loads) == 1 {
		where = "at this load"
	}
	return fmt.Sprintf("Against the best placement with hindsight (%s = 1), %s %s.", boundName, strings.Join(parts, " and "), where)
}

// WriteSummary prints Summary, one sentence per line.
func (r *Report) WriteSummary(w io.Writer) {
	for _, s := range r.Summary() {
		fmt.Fprintln(w, s)
	}
}
