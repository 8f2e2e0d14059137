package bench

import (
	"bytes"
	"strings"
	"testing"
)

// demoLikeReport has the shape of a demo run: two loads, both costs (the
// default, ttft, as kvrouter and Dynamo's as kvrouter_dynamo), the
// baselines and the oracle, with round numbers whose ratios are known.
func demoLikeReport() *Report {
	b := Bounds{Unbounded: 0.95, Capacity: 0.92, Timed: 0.9}
	return &Report{Workload: WorkloadSharedPrefix, Policies: []Point{
		{Name: PolicyKVRouter, QPS: 8, HitRate: 0.9, TTFTP90: 45, Bounds: b},
		{Name: PolicyKVRouterDynamo, QPS: 8, HitRate: 0.72, TTFTP90: 250, Bounds: b},
		{Name: PolicyRoundRobin, QPS: 8, HitRate: 0.4, TTFTP90: 250, Bounds: b},
		{Name: PolicyOracle, QPS: 8, HitRate: 0.95, Bounds: b},
		{Name: PolicyKVRouter, QPS: 64, HitRate: 0.864, TTFTP90: 1200, Bounds: b},
		{Name: PolicyKVRouterDynamo, QPS: 64, HitRate: 0.72, TTFTP90: 1500, Bounds: b},
		{Name: PolicyRoundRobin, QPS: 64, HitRate: 0.3, TTFTP90: 3000, Bounds: b},
		{Name: PolicyLeastLoaded, QPS: 64, HitRate: 0.35, TTFTP90: 2800, Bounds: b},
		{Name: PolicyOracle, QPS: 64, HitRate: 0.95, Bounds: b},
	}}
}

func TestSummary(t *testing.T) {
	full := demoLikeReport()
	noTimed := &Report{Policies: []Point{
		{Name: PolicyKVRouter, QPS: 4, HitRate: 0.5, TTFTP90: 100, Bounds: Bounds{Unbounded: 0.8}},
	}}
	baselinesOnly := &Report{Policies: []Point{
		{Name: PolicyRoundRobin, QPS: 4, HitRate: 0.5, TTFTP90: 100},
		{Name: PolicyLeastLoaded, QPS: 4, HitRate: 0.4, TTFTP90: 90},
	}}
	rrNoHits := &Report{Policies: []Point{
		{Name: PolicyKVRouter, QPS: 4, HitRate: 0.5, TTFTP90: 100},
		{Name: PolicyRoundRobin, QPS: 4, HitRate: 0, TTFTP90: 90},
	}}
	repeated := &Report{Policies: []Point{
		{Name: PolicyKVRouter, QPS: 8, HitRate: 0.6, TTFTP90: 400, Runs: 3,
			Range: &Ranges{HitRate: Span{0.55, 0.62}, TTFTP90: Span{380, 450}}},
		{Name: PolicyRoundRobin, QPS: 8, HitRate: 0.3, TTFTP90: 800, Runs: 3,
			Range: &Ranges{HitRate: Span{0.28, 0.33}, TTFTP90: Span{700, 900}}},
	}}
	cases := []struct {
		name string
		rep  *Report
		want []string
	}{
		{"demo shape: highest shared load, both costs, oracle range", full, []string{
			"At 64 requests/s, kvrouter's default cost (ttft) served 2.9x the cached prompt tokens of round-robin (hit rate 0.86 vs 0.30), with 0.40x its p90 time to first token (1200 vs 3000 ms).",
			"At 64 requests/s, the default cost served 1.2x the cached prompt tokens of Dynamo's cost (hit rate 0.86 vs 0.72), with 0.80x its p90 time to first token (1200 vs 1500 ms).",
			"Against the best placement with hindsight (oracle_timed = 1), the default cost reached 0.96-1.00 and Dynamo's cost reached 0.80 at every load.",
		}},
		{"no oracle_timed: falls back to oracle_unbounded, one load", noTimed, []string{
			"Against the best placement with hindsight (oracle_unbounded = 1), the default cost reached 0.62 at this load.",
		}},
		{"no router policy: nothing to say", baselinesOnly, nil},
		{"round-robin with no hits: the hit ratio is n/a, the TTFT ratio stands", rrNoHits, []string{
			"At 4 requests/s, kvrouter's default cost (ttft) served cached prompt tokens where round-robin served none (ratio n/a) (hit rate 0.50 vs 0.00), with 1.1x its p90 time to first token (100 vs 90 ms).",
		}},
		{"repeated points: medians with their ranges", repeated, []string{
			"At 8 requests/s (medians of 3 runs, ranges in brackets), kvrouter's default cost (ttft) served 2.0x the cached prompt tokens of round-robin (hit rate 0.60 [0.55-0.62] vs 0.30 [0.28-0.33]), with 0.50x its p90 time to first token (400 [380-450] vs 800 [700-900] ms).",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.rep.Summary()
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

func TestLegendNamesEveryColumn(t *testing.T) {
	var table, legend bytes.Buffer
	if err := demoLikeReport().WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	WriteLegend(&legend)
	header := strings.Fields(strings.SplitN(table.String(), "\n", 2)[0])
	for _, col := range header {
		name := strings.TrimSuffix(strings.TrimSuffix(col, "_ms"), "")
		for _, prefix := range []string{"ttft", "itl"} {
			if strings.HasPrefix(name, prefix+"_") {
				name = prefix
			}
		}
		if col == "policy" || col == "qps" {
			continue
		}
		if !strings.Contains(legend.String(), name) {
			t.Errorf("column %q is not explained in the legend:\n%s", col, legend.String())
		}
	}
	if !strings.Contains(legend.String(), "kvrouter = this router with its default cost (--router-cost ttft)") {
		t.Errorf("the legend does not say which row is the default:\n%s", legend.String())
	}
}

// A round-robin hit rate of 0 has no ratio: the ratios line says n/a,
// never "0.00x".
func TestRatiosRoundRobinWithoutHits(t *testing.T) {
	rep := &Report{Policies: []Point{
		{Name: PolicyKVRouter, QPS: 4, HitRate: 0.5, TTFTP90: 100, ThroughputTokS: 900},
		{Name: PolicyRoundRobin, QPS: 4, HitRate: 0, TTFTP90: 200, ThroughputTokS: 600},
	}}
	var buf bytes.Buffer
	rep.WriteRatios(&buf)
	got := buf.String()
	if strings.Contains(got, "hit rate 0.00x") || !strings.Contains(got, "/round_robin hit rate n/a") ||
		!strings.Contains(got, "TTFT p90 0.50x, throughput 1.50x") {
		t.Fatalf("ratios:\n%s", got)
	}
}
