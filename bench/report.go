package bench

import (
	"encoding/json"
	"fmt"
	"io"
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
	ThroughputTokS float64 `json:"throughput_tok_s"`
	Errors         int     `json:"errors"`
	// LoadSpread is the mean over the run of max/mean active KV tokens
	// per worker (1 = perfectly even), sampled from the workers.
	LoadSpread float64 `json:"load_spread,omitempty"`
}

// Report is a whole sweep: every policy at every QPS point.
type Report struct {
	Workload string  `json:"workload"`
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

// WriteTable prints the points grouped by QPS, one row per policy.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tqps\thit_rate\tttft_p50_ms\tttft_p90_ms\tttft_p99_ms\titl_p50_ms\ttok/s\terrors\tload_spread\t\n")
	for _, p := range r.sorted() {
		if p.Name == PolicyOracle {
			fmt.Fprintf(tw, "%s\t%.2f\t%.3f\t-\t-\t-\t-\t-\t-\t-\t\n", p.Name, p.QPS, p.HitRate)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.3f\t%.1f\t%.1f\t%.1f\t%.2f\t%.0f\t%d\t%.2f\t\n",
			p.Name, p.QPS, p.HitRate, p.TTFTP50, p.TTFTP90, p.TTFTP99, p.ITLP50, p.ThroughputTokS, p.Errors, p.LoadSpread)
	}
	return tw.Flush()
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

// Ratio compares kvrouter with round-robin and the oracle at one QPS.
// A field is NaN-free: it is 0 when its denominator is missing or zero.
type Ratio struct {
	QPS float64
	// HitRate, TTFTP90 and Throughput are kvrouter / round_robin.
	HitRate    float64
	TTFTP90    float64
	Throughput float64
	// HitVsOracle is kvrouter hit rate / oracle hit rate.
	HitVsOracle float64
}

// Ratios returns one Ratio per QPS point that has a kvrouter entry.
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
		if kvp.Name != PolicyKVRouter {
			continue
		}
		ra := Ratio{QPS: kvp.QPS}
		if rr, ok := byKey[PolicyRoundRobin][kvp.QPS]; ok {
			ra.HitRate = ratio(kvp.HitRate, rr.HitRate)
			ra.TTFTP90 = ratio(kvp.TTFTP90, rr.TTFTP90)
			ra.Throughput = ratio(kvp.ThroughputTokS, rr.ThroughputTokS)
		}
		if or, ok := byKey[PolicyOracle][kvp.QPS]; ok {
			ra.HitVsOracle = ratio(kvp.HitRate, or.HitRate)
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
		if ra.Throughput != 0 || ra.HitRate != 0 || ra.TTFTP90 != 0 {
			parts = append(parts, fmt.Sprintf("kvrouter/round_robin hit rate %.2fx, TTFT p90 %.2fx, throughput %.2fx",
				ra.HitRate, ra.TTFTP90, ra.Throughput))
		}
		if ra.HitVsOracle != 0 {
			parts = append(parts, fmt.Sprintf("kvrouter/oracle hit rate %.3f", ra.HitVsOracle))
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "qps %.2f: %s\n", ra.QPS, strings.Join(parts, "; "))
		}
	}
}
