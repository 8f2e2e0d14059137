package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func sampleReport() *Report {
	return &Report{Workload: WorkloadSharedPrefix, Policies: []Point{
		{Name: PolicyRoundRobin, QPS: 4, HitRate: 0.2, TTFTP90: 800, ThroughputTokS: 500},
		{Name: PolicyKVRouter, QPS: 4, HitRate: 0.8, TTFTP90: 200, ThroughputTokS: 1000},
		{Name: PolicyOracle, QPS: 4, HitRate: 0.84},
		{Name: PolicyKVRouter, QPS: 2, HitRate: 0.7, TTFTP90: 100, ThroughputTokS: 600},
		{Name: PolicyRoundRobin, QPS: 2, HitRate: 0.2, TTFTP90: 100, ThroughputTokS: 600},
	}}
}

func TestReportJSONFieldNames(t *testing.T) {
	dir := t.TempDir()
	path, err := sampleReport().WriteJSON(dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	if keys := sortedKeys(top); !slices.Equal(keys, []string{"policies", "repeats", "seed", "workload"}) {
		t.Fatalf("top-level keys %v", keys)
	}
	var points []map[string]any
	if err := json.Unmarshal(top["policies"], &points); err != nil {
		t.Fatal(err)
	}
	want := []string{"errors", "hit_rate", "itl_p50_ms", "itl_p90_ms", "name", "oracle_capacity", "oracle_timed", "oracle_unbounded",
		"qps", "throughput_tok_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms"}
	for _, p := range points {
		if keys := sortedKeys(p); !slices.Equal(keys, want) {
			t.Fatalf("point keys %v, want %v", keys, want)
		}
	}
	if points[1]["name"] != "kvrouter" || points[1]["hit_rate"] != 0.8 {
		t.Fatalf("second point %v", points[1])
	}
}

func TestRatios(t *testing.T) {
	ra := sampleReport().Ratios()
	if len(ra) != 2 || ra[0].QPS != 2 || ra[1].QPS != 4 {
		t.Fatalf("ratios %+v", ra)
	}
	r4 := ra[1]
	if r4.HitRate != 4 || r4.TTFTP90 != 0.25 || r4.Throughput != 2 {
		t.Fatalf("kvrouter/round_robin at qps 4: %+v", r4)
	}
	if r4.HitVsOracle < 0.952 || r4.HitVsOracle > 0.953 {
		t.Fatalf("kvrouter/oracle %v, want 0.8/0.84", r4.HitVsOracle)
	}
	if ra[0].HitVsOracle != 0 {
		t.Fatalf("no oracle at qps 2 but ratio %v", ra[0].HitVsOracle)
	}
	var buf bytes.Buffer
	sampleReport().WriteRatios(&buf)
	if !strings.Contains(buf.String(), "throughput 2.00x") {
		t.Fatalf("ratios text: %s", buf.String())
	}
}

func TestTableOrdersByQPSThenPolicy(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("table has %d lines:\n%s", len(lines), buf.String())
	}
	var first []string
	for _, l := range lines[1:] {
		first = append(first, strings.Fields(l)[0]+"@"+strings.Fields(l)[1])
	}
	want := []string{"kvrouter@2.00", "round_robin@2.00", "kvrouter@4.00", "round_robin@4.00", "oracle@4.00"}
	if !slices.Equal(first, want) {
		t.Fatalf("row order %v, want %v", first, want)
	}
}

func TestWritePlots(t *testing.T) {
	dir := t.TempDir()
	paths, err := sampleReport().WritePlots(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{PlotTTFT, PlotThroughput, PlotHitRate} {
		p := filepath.Join(dir, name)
		if !slices.Contains(paths, p) {
			t.Errorf("%s not among returned paths %v", name, paths)
		}
		st, err := os.Stat(p)
		if err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v, size %d", name, err, sizeOf(st))
		}
		head := make([]byte, 8)
		f, _ := os.Open(p)
		_, _ = f.Read(head)
		f.Close()
		if !bytes.HasPrefix(head, []byte("\x89PNG")) {
			t.Errorf("%s is not a PNG", name)
		}
	}
	empty := &Report{Workload: "x"}
	if paths, err := empty.WritePlots(t.TempDir()); err != nil || len(paths) != 0 {
		t.Errorf("an empty report: plotted %v, %v; want nothing and no error", paths, err)
	}
}

func sizeOf(st os.FileInfo) int64 {
	if st == nil {
		return 0
	}
	return st.Size()
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestRatiosOfBothCostsAgainstEveryBaseline(t *testing.T) {
	b := Bounds{Unbounded: 1, Capacity: 0.9, Timed: 0.8}
	rep := &Report{Policies: []Point{
		{Name: PolicyKVRouterDynamo, QPS: 8, HitRate: 0.6, TTFTP90: 400, Bounds: b},
		{Name: PolicyKVRouter, QPS: 8, HitRate: 0.76, TTFTP90: 100, Bounds: b},
		{Name: PolicyRoundRobin, QPS: 8, HitRate: 0.2, TTFTP90: 800, Bounds: b},
		{Name: PolicyLeastLoaded, QPS: 8, HitRate: 0.2, TTFTP90: 200, Bounds: b},
	}}
	ra := rep.Ratios()
	if len(ra) != 2 || ra[0].Policy != PolicyKVRouter || ra[1].Policy != PolicyKVRouterDynamo {
		t.Fatalf("ratios %+v", ra)
	}
	ttft := ra[0]
	if ttft.TTFTP90 != 0.125 || ttft.TTFTP90VsLeastLoaded != 0.5 || ttft.TTFTP90VsDynamo != 0.25 ||
		math.Abs(ttft.HitVsTimed-0.95) > 1e-12 || ttft.HitVsOracle != 0.76 {
		t.Fatalf("kvrouter (the ttft cost) ratios %+v", ttft)
	}
	if ra[1].TTFTP90VsDynamo != 0 {
		t.Fatalf("Dynamo's cost compared with itself: %+v", ra[1])
	}
	var buf bytes.Buffer
	rep.WriteRatios(&buf)
	if !strings.Contains(buf.String(), "kvrouter: /round_robin") || !strings.Contains(buf.String(), "/kvrouter_dynamo TTFT p90 0.25x") ||
		!strings.Contains(buf.String(), "0.950 of oracle_timed") {
		t.Fatalf("ratios text:\n%s", buf.String())
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "oracle_timed") || !strings.Contains(table.String(), "0.800") {
		t.Fatalf("table without the bounds:\n%s", table.String())
	}
}
