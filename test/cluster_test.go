package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/replica"
)

// startCluster starts n replicas sharing the first one's embedded NATS,
// joined over real memberlist sockets on loopback.
func startCluster(t *testing.T, n int) []*replica.Replica { return startClusterTB(t, n) }

func startClusterTB(t testing.TB, n int) []*replica.Replica {
	t.Helper()
	var reps []*replica.Replica
	for i := 0; i < n; i++ {
		reps = append(reps, startMember(t, reps, i))
	}
	waitMembers(t, reps, n)
	return reps
}

func startMember(t testing.TB, peers []*replica.Replica, i int) *replica.Replica {
	t.Helper()
	return StartReplica(t, func(c *config.Config) {
		c.ReplicaID = fmt.Sprintf("r%d-%d", i, time.Now().UnixNano()%100000)
		c.ClusterBind = "127.0.0.1:0"
		c.ClusterFast = true
		c.HeartbeatTimeout = time.Minute
		if len(peers) > 0 {
			c.NATSURL = peers[0].NATSURL()
			for _, p := range peers {
				c.ClusterJoin = append(c.ClusterJoin, p.ClusterAddr())
			}
		}
	})
}

func waitMembers(t testing.TB, reps []*replica.Replica, n int) {
	t.Helper()
	testutil.EventuallyNil(t, 15*time.Second, func() error {
		for _, r := range reps {
			if m := len(r.Members()); m != n {
				return fmt.Errorf("%s sees %d members, want %d", r.ID(), m, n)
			}
		}
		return nil
	})
}

func rankActive(t *testing.T, base string, worker uint64) uint32 {
	for _, w := range workers(t, base).Workers {
		if w.WorkerID == worker {
			return w.Ranks[0].ActiveRequests
		}
	}
	return 0
}

// TestClusterSharesLoadAndDropsDeadReplica: a request routed through one
// replica is in every replica's load view within the gossip delay; when a
// replica dies, peers drop its requests within memberlist's suspicion
// timeout; a replica started late replays the KV events to the same index.
func TestClusterSharesLoadAndDropsDeadReplica(t *testing.T) {
	reps := startCluster(t, 3)
	a, b, c := BaseURL(reps[0]), BaseURL(reps[1]), BaseURL(reps[2])
	nc := connect(t, reps[0])
	publish(t, nc, "kvrouter.workers", heartbeat(1))
	publish(t, nc, "kvrouter.workers", heartbeat(2))
	for _, base := range []string{a, b, c} {
		base := base
		testutil.EventuallyNil(t, 5*time.Second, func() error {
			if n := len(workers(t, base).Workers); n != 2 {
				return fmt.Errorf("%s: %d workers", base, n)
			}
			return nil
		})
	}

	// (1) load routed through A shows up on B and C.
	start := time.Now()
	var got routeReply
	if code := Post(t, a+"/route", map[string]any{"request_id": "via-a", "token_ids": tokens(320, 1)}, &got); code != 200 {
		t.Fatalf("route via A: %d", code)
	}
	testutil.EventuallyNil(t, 2*time.Second, func() error {
		for _, base := range []string{b, c} {
			if n := rankActive(t, base, got.WorkerID); n != 1 {
				return fmt.Errorf("%s sees %d active requests on worker %d", base, n, got.WorkerID)
			}
		}
		return nil
	})
	t.Logf("gossip delay (route on A → visible on B and C, including polling): %v", time.Since(start))

	// Free through A propagates too.
	if code := Post(t, a+"/free", map[string]any{"request_id": "via-a"}, nil); code != 200 {
		t.Fatal("free via A")
	}
	testutil.EventuallyNil(t, 2*time.Second, func() error {
		if n := rankActive(t, b, got.WorkerID); n != 0 {
			return fmt.Errorf("B still sees %d", n)
		}
		return nil
	})

	// (3, first half) KV events for everyone, then a late fourth replica.
	prompt := tokens(480, 7)
	publish(t, nc, "kvrouter.kv_events", storedEvent(2, 0, prompt, 70000))

	// (2) B routes 4 requests, then dies without leaving.
	for i := 0; i < 4; i++ {
		if code := Post(t, b+"/route", map[string]any{"request_id": fmt.Sprintf("via-b-%d", i), "token_ids": tokens(64, uint32(10+i))}, nil); code != 200 {
			t.Fatalf("route via B: %d", code)
		}
	}
	testutil.EventuallyNil(t, 2*time.Second, func() error {
		if n := totalActive(t, c); n != 4 {
			return fmt.Errorf("C sees %d of B's requests", n)
		}
		return nil
	})
	killed := time.Now()
	reps[1].Kill()
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		for _, base := range []string{a, c} {
			if n := totalActive(t, base); n != 0 {
				return fmt.Errorf("%s still holds %d of the dead replica's requests", base, n)
			}
		}
		return nil
	})
	t.Logf("dead replica's requests dropped after %v", time.Since(killed))

	// (3) A late replica replays the stream to the same index.
	late := startMember(t, []*replica.Replica{reps[0], reps[2]}, 3)
	lbase := BaseURL(late)
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		code, body := Get(t, lbase+"/readyz")
		if code != 200 {
			return fmt.Errorf("late replica not ready: %s", body)
		}
		return nil
	})
	publish(t, nc, "kvrouter.workers", heartbeat(1))
	publish(t, nc, "kvrouter.workers", heartbeat(2))
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		want := workers(t, a).IndexDigest
		if got := workers(t, lbase).IndexDigest; got != want || want == 0 {
			return fmt.Errorf("late replica index digest %d, others %d", got, want)
		}
		var r routeReply
		Post(t, lbase+"/route", map[string]any{"token_ids": prompt, "update_states": false}, &r)
		if r.WorkerID != 2 || r.OverlapBlocks != 30 {
			return fmt.Errorf("late replica routes %+v, want worker 2 with 30 blocks", r)
		}
		return nil
	})
	_, m := Get(t, a+"/metrics")
	if !strings.Contains(m, "kvrouter_cluster_members") {
		t.Error("/metrics lacks cluster members")
	}
}

func totalActive(t *testing.T, base string) uint32 {
	var n uint32
	for _, w := range workers(t, base).Workers {
		for _, r := range w.Ranks {
			n += r.ActiveRequests
		}
	}
	return n
}
