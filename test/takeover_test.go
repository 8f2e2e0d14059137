package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
)

// TestRetriedRouteIsCountedOnce: a replica routes two requests and dies
// before its client gets the answers; the client retries both
// request_ids through a survivor, one decided again on the same rank and
// one on another. Every survivor counts each request once, before and
// after it drops the dead replica's requests, and the retried requests
// free cleanly through the other survivor.
func TestRetriedRouteIsCountedOnce(t *testing.T) {
	reps := startCluster(t, 3)
	a, b, c := BaseURL(reps[0]), BaseURL(reps[1]), BaseURL(reps[2])
	nc := connect(t, reps[0])
	publish(t, nc, "kvrouter.workers", heartbeat(1))
	publish(t, nc, "kvrouter.workers", heartbeat(2))
	for _, base := range []string{a, b, c} {
		testutil.EventuallyNil(t, 5*time.Second, func() error {
			if n := len(workers(t, base).Workers); n != 2 {
				return fmt.Errorf("%s: %d workers", base, n)
			}
			return nil
		})
	}
	route := func(base, id string, worker uint64, salt uint32) {
		t.Helper()
		body := map[string]any{"request_id": id, "token_ids": tokens(128, salt), "pinned_worker": map[string]any{"worker_id": worker, "dp_rank": 0}}
		if code := Post(t, base+"/route", body, nil); code != 200 {
			t.Fatalf("route %s via %s: %d", id, base, code)
		}
	}
	counts := func(want1, want2 uint32) func() error {
		return func() error {
			for _, base := range []string{b, c} {
				if n1, n2 := rankActive(t, base, 1), rankActive(t, base, 2); n1 != want1 || n2 != want2 {
					return fmt.Errorf("%s counts %d on worker 1 and %d on worker 2, want %d and %d", base, n1, n2, want1, want2)
				}
			}
			return nil
		}
	}
	route(a, "same-rank", 1, 1)
	route(a, "other-rank", 1, 2)
	testutil.EventuallyNil(t, 2*time.Second, counts(2, 0))

	reps[0].Kill() // dies without leaving: its records stay until peers detect it
	route(b, "same-rank", 1, 1)
	route(b, "other-rank", 2, 2)
	testutil.EventuallyNil(t, 300*time.Millisecond, counts(1, 1))

	// Once the survivors drop the dead replica's requests, the retried
	// ones (now theirs) are still counted, once.
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		for _, base := range []string{b, c} {
			if originsDropped(t, base) < 1 {
				return fmt.Errorf("%s has not dropped the dead replica", base)
			}
		}
		return nil
	})
	if err := counts(1, 1)(); err != nil {
		t.Fatalf("after the dead replica's drop: %v", err)
	}
	for _, id := range []string{"same-rank", "other-rank"} {
		if code := Post(t, c+"/free", map[string]any{"request_id": id}, nil); code != 200 {
			t.Fatalf("free %s via C: %d", id, code)
		}
	}
	testutil.EventuallyNil(t, 2*time.Second, counts(0, 0))
}
