package bench

import (
	"fmt"
	"io"
	"strings"
)

// tableLegend explains the rows and columns of WriteTable, printed right
// under it so a reader does not have to look them up.
var tableLegend = []string{
	"rows:    kvrouter = this router with its default cost (--router-cost dynamo); kvrouter_ttft = the opt-in --router-cost ttft;",
	"         round_robin, random, least_loaded = baselines that pick an engine without looking at caches; oracle = hit-rate upper bounds",
	"columns: hit_rate = share of prompt tokens served from cache; vs_timed = hit_rate / oracle_timed (1.0 = as good as hindsight);",
	"         oracle_unb / oracle_cap / oracle_timed = best hit rate with hindsight, with an unlimited cache / each engine's real cache /",
	"         real cache and a block counting only once its prefill finished; ttft = time to first token, itl = inter-token latency (ms);",
	"         tok/s = output tokens per second; errors = failed requests; load_spread = busiest engine's KV load / the mean (1 = even)",
}

// WriteLegend prints tableLegend.
func WriteLegend(w io.Writer) {
	for _, l := range tableLegend {
		fmt.Fprintln(w, l)
	}
}

// Summary returns up to three plain sentences on the report: the
// default cost against round-robin at the highest load both ran, the
// opt-in ttft cost against the default at that load, and how close each
// cost came to the oracle over every load. A sentence whose policies
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
		if s := compare("kvrouter's default cost", "round-robin", kv, rr); s != "" {
			out = append(out, s)
		}
	}
	if ttft, kv, ok := top(PolicyKVRouterTTFT, PolicyKVRouter); ok {
		if s := compare("the opt-in ttft cost (kvrouter_ttft)", "the default cost", ttft, kv); s != "" {
			out = append(out, s)
		}
	}
	if s := r.oracleSentence(); s != "" {
		out = append(out, s)
	}
	return out
}

// compare says how many cached tokens and what TTFT p90 a had relative
// to b at the same load ("" when b gives nothing to divide by).
func compare(aName, bName string, a, b Point) string {
	if b.HitRate == 0 || b.TTFTP90 == 0 {
		return ""
	}
	return fmt.Sprintf("At %g requests/s, %s served %sx the cached prompt tokens of %s (hit rate %.2f vs %.2f), with %sx its p90 time to first token (%.0f vs %.0f ms).",
		a.QPS, aName, times(a.HitRate/b.HitRate), bName, a.HitRate, b.HitRate, times(a.TTFTP90/b.TTFTP90), a.TTFTP90, b.TTFTP90)
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
	for _, name := range []string{PolicyKVRouter, PolicyKVRouterTTFT} {
		s := shares[name]
		if s == nil {
			continue
		}
		label := "the default cost"
		if name == PolicyKVRouterTTFT {
			label = "the ttft cost"
		}
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
