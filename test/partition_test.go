package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/internal/testutil"
)

// TestPartitionedReplicaReconciles cuts one replica process off (SIGSTOP:
// it neither sends nor answers) long enough for memberlist to declare it
// dead, changes the fleet's load while it is away, then lets it back.
// While it is away its peers drop its requests; once it is back, the
// anti-entropy digests make every replica hold the same fleet-wide load
// again: its peers regain its requests and it learns what changed.
func TestPartitionedReplicaReconciles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 replica processes")
	}
	var static []string
	for id := 1; id <= 4; id++ {
		static = append(static, fmt.Sprintf("%d=http://127.0.0.1:%d", id, id)) // /route never contacts them
	}
	c := startProcessCluster(t, 3, "--static-workers", strings.Join(static, ","), "--log-level", "warn")
	cut, a, b := c.Replicas[1], c.Replicas[0].BaseURL, c.Replicas[2].BaseURL
	all := []string{a, cut.BaseURL, b}
	route := func(base, id string) {
		t.Helper()
		body := map[string]any{"request_id": id, "token_ids": tokens(512, uint32(len(id))), "update_states": true}
		if code := Post(t, base+"/route", body, nil); code != 200 {
			t.Fatalf("route %s on %s: status %d", id, base, code)
		}
	}
	free := func(base, id string) {
		t.Helper()
		if code := Post(t, base+"/free", map[string]any{"request_id": id}, nil); code != 200 {
			t.Fatalf("free %s on %s: status %d", id, base, code)
		}
	}
	agree := func(what string, want uint32, urls ...string) time.Duration {
		t.Helper()
		start := time.Now()
		testutil.EventuallyNil(t, 15*time.Second, func() error {
			for _, u := range urls {
				if n := totalActive(t, u); n != want {
					return fmt.Errorf("%s: %s holds %d requests, want %d", what, u, n, want)
				}
			}
			return nil
		})
		return time.Since(start)
	}
	for i := range 5 {
		route(cut.BaseURL, fmt.Sprintf("cut-%d", i))
		route(a, fmt.Sprintf("a-%d", i))
	}
	agree("before the partition", 10, all...)

	if err := cut.Pause(); err != nil {
		t.Fatal(err)
	}
	bound := cluster.LocalTestConfig().FailureDetectionBound(3)
	dropped := agree("peers drop the cut-off replica's requests", 5, a, b)
	t.Logf("peers dropped the cut-off replica's 5 requests %v after the cut (bound %v)", dropped, bound)
	if dropped > bound {
		t.Fatalf("peers took %v to drop the cut-off replica, bound %v", dropped, bound)
	}
	// The fleet moves on without it.
	free(a, "a-0")
	free(a, "a-1")
	route(b, "b-0")
	route(b, "b-1")
	route(b, "b-2")
	agree("while cut off", 6, a, b)

	if err := cut.Resume(); err != nil {
		t.Fatal(err)
	}
	healed := agree("after the partition heals", 11, all...)
	t.Logf("all three replicas hold the same 11 requests %v after the cut-off replica came back", healed)
	// The failure detector's metrics tell the story: both peers suspected
	// and buried a replica that then came back with its boot key (a false
	// death, as a stall or a partition looks), and it refuted its death.
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		for _, u := range []string{a, b} {
			d, err := bench.ScrapeDetector(t.Context(), []string{u})
			if err != nil {
				return err
			}
			if d.Suspicions < 1 || d.Deaths < 1 || d.FalseDeaths < 1 {
				return fmt.Errorf("%s: %s; want the cut-off replica suspected, declared dead and counted as a false death", u, d)
			}
		}
		d, err := bench.ScrapeDetector(t.Context(), []string{cut.BaseURL})
		if err != nil {
			return err
		}
		if d.Refutations < 1 {
			return fmt.Errorf("cut-off replica: %s; want its death refuted", d)
		}
		return nil
	})
	// And they keep agreeing as the load changes.
	free(cut.BaseURL, "cut-0")
	free(b, "b-0")
	agree("after more changes", 9, all...)
}
