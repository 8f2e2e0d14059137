package bench

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseQPSList(t *testing.T) {
	got, err := ParseQPSList("1, 2.5,,4")
	if err != nil || len(got) != 3 || got[1] != 2.5 {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"0", "-1", "x", "inf"} {
		if _, err := ParseQPSList(bad); !errors.Is(err, ErrBadWorkload) {
			t.Errorf("%q: got %v", bad, err)
		}
	}
}

func TestBuildSyntheticSizesByDuration(t *testing.T) {
	o := WorkloadOptions{Kind: WorkloadRandom, Random: RandomConfig{InputTokens: 8, OutputTokens: 2}, Duration: 3 * time.Second, Seed: 1}
	schedule, qps, err := o.Build([]float64{2, 5})
	if err != nil || len(qps) != 2 {
		t.Fatalf("%v %v", qps, err)
	}
	reqs, err := schedule(5)
	if err != nil || len(reqs) != 15 {
		t.Fatalf("got %d requests, %v; want 15", len(reqs), err)
	}
	o.Requests = 4
	schedule, _, _ = o.Build([]float64{2})
	if reqs, _ := schedule(2); len(reqs) != 4 {
		t.Fatalf("--requests 4 gave %d", len(reqs))
	}
	for _, bad := range []WorkloadOptions{
		{Kind: "nope", Requests: 1},
		{Kind: WorkloadRandom},
	} {
		if _, _, err := bad.Build([]float64{1}); !errors.Is(err, ErrBadWorkload) {
			t.Errorf("%+v: got %v", bad, err)
		}
	}
	if _, _, err := o.Build(nil); !errors.Is(err, ErrBadWorkload) {
		t.Errorf("no qps: got %v", err)
	}
}

func TestBuildTraceScalesToQPS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(tinyTrace), 0o644); err != nil {
		t.Fatal(err)
	}
	o := WorkloadOptions{Kind: WorkloadMooncake, TracePath: path, TimeScale: 2}
	schedule, qps, err := o.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	// 3 requests over 30 ms: 66.7 qps natively, 133.3 at time scale 2.
	if len(qps) != 1 || math.Abs(qps[0]-400.0/3) > 1e-9 {
		t.Fatalf("qps %v", qps)
	}
	reqs, err := schedule(qps[0])
	if err != nil || len(reqs) != 3 || reqs[2].Arrival != 15*time.Millisecond {
		t.Fatalf("reqs %d, last arrival %v, err %v", len(reqs), reqs[len(reqs)-1].Arrival, err)
	}
	if _, _, err := (WorkloadOptions{Kind: WorkloadMooncake, TracePath: filepath.Join(t.TempDir(), "missing")}).Build(nil); err == nil {
		t.Fatal("a missing trace was accepted")
	}
}
