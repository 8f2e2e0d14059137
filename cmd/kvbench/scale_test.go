package main

import (
	"bytes"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/config"
)

func TestParseCounts(t *testing.T) {
	got, err := parseCounts(" 1, 3 ,5")
	if err != nil || !slices.Equal(got, []int{1, 3, 5}) {
		t.Errorf("parseCounts: %v %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "1,,3", "two", "1.5"} {
		if _, err := parseCounts(bad); err == nil || !strings.Contains(err.Error(), "want a positive integer") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestParseScaleFlags(t *testing.T) {
	f, counts, err := parseScaleFlags([]string{"--replicas", "2,4", "--interleave", "3s", "--router-active-sequence-stride", "1", "--no-gossip"}, io.Discard)
	if err != nil || !slices.Equal(counts, []int{2, 4}) || f.interleave != 3*time.Second || f.stride != 1 || !f.noGossip {
		t.Errorf("flags %+v counts %v err %v", f, counts, err)
	}
	f, counts, err = parseScaleFlags(nil, io.Discard)
	if err != nil || !slices.Equal(counts, []int{1, 3, 5}) || f.cpuPerReplica != 0.2 || f.workers != 16 || f.rounds != 3 ||
		f.stride != config.DefaultActiveSequenceStride {
		t.Errorf("defaults %+v counts %v err %v", f, counts, err)
	}
}

func TestScaleHelpers(t *testing.T) {
	if got := scaleStaticWorkers(3); !slices.Equal(got, []string{"1=http://127.0.0.1:1", "2=http://127.0.0.1:2", "3=http://127.0.0.1:3"}) {
		t.Errorf("static workers %v", got)
	}
	p := scalePrompts(1, 4, 100)
	if len(p) != 4 || len(p[0]) != 100 || slices.Equal(p[0], p[1]) {
		t.Fatalf("prompts: %d of %d tokens", len(p), len(p[0]))
	}
	if !slices.EqualFunc(p, scalePrompts(1, 4, 100), slices.Equal) || slices.EqualFunc(p, scalePrompts(2, 4, 100), slices.Equal) {
		t.Error("prompts do not follow the seed")
	}
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	in := []float64{3, 1, 2}
	median(in)
	if !slices.Equal(in, []float64{3, 1, 2}) {
		t.Error("median reordered its input")
	}
	if got := formatFloats([]float64{1, 2.25}); got != "1.0 2.2" && got != "1.0 2.3" {
		t.Errorf("formatFloats = %q", got)
	}
	if got := formatRatios([]float64{2.5, 3}); got != "2.50x 3.00x" {
		t.Errorf("formatRatios = %q", got)
	}
	if capText(0) != "uncapped" || capText(0.3) != "0.3" {
		t.Errorf("capText: %q %q", capText(0), capText(0.3))
	}
}

func scaleRes(perSec, cpu float64) scaleResult {
	return scaleResult{load: bench.DecisionLoadResult{Decisions: int64(perSec), Elapsed: time.Second}, cpuPerDecision: cpu}
}

func TestScaleSummary(t *testing.T) {
	var out bytes.Buffer
	s := newScaleSummary()
	counts := []int{1, 3, 5}
	suspected := scaleRes(4000, 500)
	suspected.detector = bench.DetectorCounts{Suspicions: 2, Refutations: 1, Deaths: 1, FalseDeaths: 1}
	for round, r := range [][]scaleResult{
		{scaleRes(1000, 400), scaleRes(2500, 480), scaleRes(4000, 500)},
		{scaleRes(1000, 400), scaleRes(3000, 420), suspected},
		{scaleRes(1200, 380), scaleRes(3000, 440), suspected},
	} {
		if err := s.addRound(&out, round+1, counts, r, make([]error, 3)); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(s.ratios[3], []float64{2.5, 3, 2.5}) || !slices.Equal(s.ratios[5], []float64{4, 4, 4000.0 / 1200}) {
		t.Errorf("ratios %v", s.ratios)
	}
	if want := (bench.DetectorCounts{Suspicions: 4, Refutations: 2, Deaths: 2, FalseDeaths: 2}); s.detector[5] != want || s.detector[3] != (bench.DetectorCounts{}) {
		t.Errorf("detector counts %v", s.detector)
	}
	s.write(&out, counts, 3)
	text := out.String()
	// Medians: 1,000 vs 3,000 decisions/s, ratio 2.5x; CPU 400 vs 440 µs
	// per decision: 3 x 400 / 440 = 2.73x.
	for _, want := range []string{"1 replica(s): 1000 decisions/s, 400.0 cpu-µs/decision", "3 replica(s): 3000 decisions/s",
		"3 vs 1 replica(s): 2.50x decisions/s (per round: 2.50x 3.00x 2.50x); from CPU per decision: 2.73x",
		"5 vs 1 replica(s): 4.00x decisions/s (per round: 4.00x 4.00x 3.33x)",
		"5 replica(s): 4000 decisions/s, 500.0 cpu-µs/decision; failure detector in its windows: 4 suspicions, 2 refutations, 2 deaths (2 false)"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
}

func TestScaleSummaryStopsOnFailure(t *testing.T) {
	s := newScaleSummary()
	failed := scaleRes(100, 1)
	failed.load.Errors, failed.load.FirstErr = 2, "POST /route: status 503"
	err := s.addRound(io.Discard, 2, []int{1, 3}, []scaleResult{scaleRes(100, 1), failed}, make([]error, 2))
	if err == nil || !strings.Contains(err.Error(), "round 2, 3 replicas: 2 failed decisions (first: POST /route: status 503)") {
		t.Errorf("failed decisions: %v", err)
	}
	err = s.addRound(io.Discard, 1, []int{1}, []scaleResult{{}}, []error{errors.New("boom")})
	if err == nil || !strings.Contains(err.Error(), "round 1, 1 replicas: boom") {
		t.Errorf("measurement error: %v", err)
	}
	if math.IsNaN(median(s.perSec[1])) {
		t.Error("NaN median")
	}
}
