package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/bench"
)

// --apis json,grpc,grpc-stream measures each API against the same
// in-process router (with state updates: route then free), searches each
// one's max afresh and measures at a fraction of it. The SLO asks only
// for no errors: a loaded machine must not make a 200 ms step "missed".
func TestHTTPComparesAPIs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a router")
	}
	out := filepath.Join(t.TempDir(), "apis.json")
	err, stdout, stderr := runArgs(t, "http", "--apis", "json,grpc,grpc-stream", "--workers", "3", "--busy-per-worker", "1",
		"--find-max", "--rate", "100", "--max-rate", "150", "--refine", "0", "--at-max-fractions", "0.5",
		"--duration", "200ms", "--warmup", "0s", "--pause", "0s", "--slo-p99", "0", "--slo-achieved", "0", "--out", out)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	rep := readReport(t, out)
	for _, api := range []string{bench.APIJSON, bench.APIGRPC, bench.APIGRPCStream} {
		if rep.MaxSustainedByAPI[api] < 100 {
			t.Errorf("%s: max sustained %v, want at least the 100/s start", api, rep.MaxSustainedByAPI[api])
		}
		steps, atHalf := 0, 0
		for _, st := range rep.Steps {
			if st.API != api {
				continue
			}
			steps++
			if st.Phase == "50% of max" {
				atHalf++
			}
			if st.Failed != 0 || st.OK == 0 || st.OK != st.Scheduled {
				t.Errorf("%s step %+v: failed decisions (first error %q)", api, st, st.FirstError)
			}
		}
		if steps < 2 || atHalf != 1 {
			t.Errorf("%s: %d steps, %d at 50%% of max", api, steps, atHalf)
		}
	}
	if !strings.Contains(stdout, "grpc / json max:") || !strings.Contains(stdout, "p50/p99/p99.9 at 50%") {
		t.Errorf("no summary in:\n%s", stdout)
	}
}
