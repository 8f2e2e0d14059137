package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// Point is one (policy, offered QPS) measurement. The JSON names are the
// report.json contract.
type Point struct {
	Name           string  `json:"name"`
	QPS            float64 `json:"qps"`
	HitRate        float64 `json:"hit_rate"`
	TTFTP50        float64 `json:"ttft_p50_ms"`
	TTFTP90        float64 `json:"ttft_p90_ms"`
	TTFTP99        float64 `json:"ttft_p99_ms"`
	ITLP50         float64 `json:"itl_p50_ms"`
	ITLP90         float64 `json:"itl_p90_ms"`
	ThroughputTokS float64 `json:"throughput_tok_s"`
	Errors         int     `json:"errors"`
	// LoadSpread is the mean over the run of max/mean active KV tokens
	// per worker (1 = perfectly even), sampled from the workers.
	LoadSpread float64 `json:"load_spread,omitempty"`
	// Detector is what the replicas' failure detectors did during the
	// point, summed over replicas (only with several replicas).
	Detector *DetectorCounts `json:"failure_detector,omitempty"`
	// DisaggPaths counts the point's decisions (warm-up included) in a
	// disaggregated fleet by prefill path: remote (prefill pool, KV
	// transfer) or local (short_prompt, no_prefill_worker, same_rank).
	DisaggPaths map[string]uint64 `json:"disagg_paths,omitempty"`
	// Runs is how many times the point was measured; with more than one
	// every figure above is the median over the runs and Range holds the
	// lowest and highest (errors are summed).
	Runs  int     `json:"runs,omitempty"`
	Range *Ranges `json:"range,omitempty"`
	// Bounds are the bounds of this point's schedule on this fleet (the
	// same for every policy at one QPS): the hit-rate oracles
	// oracle_unbounded, oracle_capacity, oracle_timed, and the TTFT p90
	// floor.
	Bounds
}

// HitVsTimed is the point's hit rate over oracle_timed (0 without one).
func (p Point) HitVsTimed() float64 { return ratio(p.HitRate, p.Timed) }

// hitVsTimedCell is HitVsTimed with, for a repeated point, its range
// (oracle_timed is the same for every run of a point).
func (p Point) hitVsTimedCell() string {
	if p.Range == nil || p.Timed == 0 {
		return fmt.Sprintf("%.2f", p.HitVsTimed())
	}
	return withRange("%.2f", p.HitVsTimed(), p.Range, Span{Min: p.Range.HitRate.Min / p.Timed, Max: p.Range.HitRate.Max / p.Timed})
}

// withRange formats a figure, followed for a repeated point (rg != nil)
// by its range over the runs: "0.912 [0.901-0.930]".
func withRange(format string, v float64, rg *Ranges, s Span) string {
	out := fmt.Sprintf(format, v)
	if rg == nil {
		return out
	}
	return out + " [" + fmt.Sprintf(format, s.Min) + "-" + fmt.Sprintf(format, s.Max) + "]"
}

// Report is a whole sweep: every policy at every QPS point.
type Report struct {
	Workload string `json:"workload"`
	// Seed is the workload's --seed; Repeats how many runs each point had.
	Seed     uint64  `json:"seed"`
	Repeats  int     `json:"repeats"`
	Policies []Point `json:"policies"`
}

// ReportFile is the name of the JSON report inside the output directory.
const ReportFile = "report.json"

// WriteJSON writes report.json into dir, creating dir if needed.
func (r *Report) WriteJSON(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create output dir: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode report: %w", err)
	}
	path := filepath.Join(dir, ReportFile)
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("write report: %w", err)
	}
	return path, nil
}

// WriteTable prints the points grouped by QPS, one row per policy, each
// with the three oracles of its schedule, its hit rate over oracle_timed
// and its TTFT p90 floor. A repeated point shows each figure as
// "median [min-max]" over its runs.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tqps\thit_rate\tvs_timed\toracle_unb\toracle_cap\toracle_timed\tttft_p50_ms\tttft_p90_ms\tttft_p99_ms\tp90_floor_ms\titl_p50_ms\titl_p90_ms\ttok/s\terrors\tload_spread\t\n")
	for _, p := range r.sorted() {
		bounds := fmt.Sprintf("%.3f\t%.3f\t%.3f", p.Unbounded, p.Capacity, p.Timed)
		floor := fmt.Sprintf("%.1f", p.TTFTFloorP90)
		if p.Name == PolicyOracle {
			fmt.Fprintf(tw, "%s\t%.2f\t%.3f\t-\t%s\t-\t-\t-\t%s\t-\t-\t-\t-\t-\t\n", p.Name, p.QPS, p.HitRate, bounds, floor)
			continue
		}
		rg := p.Range
		if rg == nil {
			rg = &Ranges{}
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n",
			p.Name, p.QPS, withRange("%.3f", p.HitRate, p.Range, rg.HitRate), p.hitVsTimedCell(), bounds,
			withRange("%.1f", p.TTFTP50, p.Range, rg.TTFTP50), withRange("%.1f", p.TTFTP90, p.Range, rg.TTFTP90),
			withRange("%.1f", p.TTFTP99, p.Range, rg.TTFTP99), floor,
			withRange("%.2f", p.ITLP50, p.Range, rg.ITLP50), withRange("%.2f", p.ITLP90, p.Range, rg.ITLP90),
			withRange("%.0f", p.ThroughputTokS, p.Range, rg.ThroughputTokS), p.Errors,
			withRange("%.2f", p.LoadSpread, p.Range, rg.LoadSpread))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.sorted() {
		if p.Detector != nil {
			fmt.Fprintf(w, "failure detector, %s at %.2f qps (all replicas): %s\n", p.Name, p.QPS, p.Detector)
		}
		if len(p.DisaggPaths) > 0 {
			keys := slices.Sorted(maps.Keys(p.DisaggPaths))
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = fmt.Sprintf("%s %d", k, p.DisaggPaths[k])
			}
			fmt.Fprintf(w, "%s qps %.2f prefill paths: %s\n", p.Name, p.QPS, strings.Join(parts, ", "))
		}
	}
	return nil
}

// sorted orders points by QPS, then by AllPolicies order.
func (r *Report) sorted() []Point {
	rank := func(name string) int { return slices.Index(AllPolicies, name) }
	out := slices.Clone(r.Policies)
	slices.SortStableFunc(out, func(a, b Point) int {
		if a.QPS != b.QPS {
			if a.QPS < b.QPS {
				return -1
			}
			return 1
		}
		return rank(a.Name) - rank(b.Name)
	})
	return out
}

// Ratio compares one KV-aware policy (kvrouter, kvrouter_dynamo or
// kvrouter_approx) with the baselines at one QPS. A field is NaN-free:
// it is 0 when its denominator is missing or zero.
type Ratio struct {
	Policy string
	QPS    float64
	// HitRate, TTFTP90 and Throughput are policy / round_robin.
	HitRate    float64
	TTFTP90    float64
	Throughput float64
	// VsRoundRobin: round_robin was measured at this QPS. HitRateNA: its
	// hit rate was 0, so HitRate has no meaning (printed n/a).
	VsRoundRobin bool
	HitRateNA    bool
	// TTFTP90VsLeastLoaded is policy / least_loaded TTFT p90.
	TTFTP90VsLeastLoaded float64
	// TTFTP90VsDynamo is policy / kvrouter_dynamo (Dynamo's cost) TTFT
	// p90, for the other KV-aware policies.
	TTFTP90VsDynamo float64
	// HitVsOracle is the hit rate over oracle_unbounded, HitVsTimed over
	// oracle_timed (the routing goal's yardstick).
	HitVsOracle float64
	HitVsTimed  float64
}

// Ratios returns one Ratio per QPS point of each KV-aware policy.
func (r *Report) Ratios() []Ratio {
	byKey := map[string]map[float64]Point{}
	for _, p := range r.Policies {
		if byKey[p.Name] == nil {
			byKey[p.Name] = map[float64]Point{}
		}
		byKey[p.Name][p.QPS] = p
	}
	var out []Ratio
	for _, kvp := range r.sorted() {
		if !IsRouterPolicy(kvp.Name) {
			continue
		}
		ra := Ratio{Policy: kvp.Name, QPS: kvp.QPS, HitVsOracle: ratio(kvp.HitRate, kvp.Unbounded), HitVsTimed: kvp.HitVsTimed()}
		if rr, ok := byKey[PolicyRoundRobin][kvp.QPS]; ok {
			ra.VsRoundRobin, ra.HitRateNA = true, rr.HitRate == 0
			ra.HitRate = ratio(kvp.HitRate, rr.HitRate)
			ra.TTFTP90 = ratio(kvp.TTFTP90, rr.TTFTP90)
			ra.Throughput = ratio(kvp.ThroughputTokS, rr.ThroughputTokS)
		}
		if ll, ok := byKey[PolicyLeastLoaded][kvp.QPS]; ok {
			ra.TTFTP90VsLeastLoaded = ratio(kvp.TTFTP90, ll.TTFTP90)
		}
		if dy, ok := byKey[PolicyKVRouterDynamo][kvp.QPS]; ok && kvp.Name != PolicyKVRouterDynamo {
			ra.TTFTP90VsDynamo = ratio(kvp.TTFTP90, dy.TTFTP90)
		}
		if ra.HitVsOracle == 0 {
			if or, ok := byKey[PolicyOracle][kvp.QPS]; ok {
				ra.HitVsOracle = ratio(kvp.HitRate, or.HitRate)
			}
		}
		out = append(out, ra)
	}
	return out
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// WriteRatios prints Ratios in words, leaving out comparisons whose
// other policy was not measured.
func (r *Report) WriteRatios(w io.Writer) {
	for _, ra := range r.Ratios() {
		var parts []string
		if ra.VsRoundRobin {
			hit := fmt.Sprintf("%.2fx", ra.HitRate)
			if ra.HitRateNA {
				hit = "n/a (round_robin's is 0)"
			}
			parts = append(parts, fmt.Sprintf("/round_robin hit rate %s, TTFT p90 %.2fx, throughput %.2fx",
				hit, ra.TTFTP90, ra.Throughput))
		}
		if ra.TTFTP90VsLeastLoaded != 0 {
			parts = append(parts, fmt.Sprintf("/least_loaded TTFT p90 %.2fx", ra.TTFTP90VsLeastLoaded))
		}
		if ra.TTFTP90VsDynamo != 0 {
			parts = append(parts, fmt.Sprintf("/kvrouter_dynamo TTFT p90 %.2fx", ra.TTFTP90VsDynamo))
		}
		if ra.HitVsTimed != 0 {
			parts = append(parts, fmt.Sprintf("hit rate %.3f of oracle_timed", ra.HitVsTimed))
		}
		if ra.HitVsOracle != 0 {
			parts = append(parts, fmt.Sprintf("%.3f of oracle_unbounded", ra.HitVsOracle))
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "qps %.2f %s: %s\n", ra.QPS, ra.Policy, strings.Join(parts, "; "))
		}
	}
}
