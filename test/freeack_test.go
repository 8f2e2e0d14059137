package test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/internal/testutil"
)

// TestAcknowledgedFreeSurvivesKill9: a replica acknowledges frees of
// requests its peers routed and is killed (SIGKILL: no leave, no flush)
// right after the last answer. The frees still reach the survivors, which
// count none of the requests afterwards, well before anything else would
// remove them (the stale expiry is an hour; the dead replica's own
// requests are not these). The batch interval is long (200 ms) so that a
// free acknowledged before its gossip left would still be waiting in the
// dead replica's batch.
func TestAcknowledgedFreeSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 replica processes")
	}
	c := startProcessCluster(t, 3, "--heartbeat-timeout", "1m", "--log-level", "warn",
		"--cluster-batch-interval", "200ms")
	nc, err := nats.Connect(c.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	publish(t, nc, "kvrouter.workers", heartbeat(1))
	// The first replica embeds NATS: the victim is the last one.
	survivors := []string{c.Replicas[0].BaseURL, c.Replicas[1].BaseURL}
	victim := c.Replicas[2]
	for _, r := range c.Replicas {
		base := r.BaseURL
		testutil.EventuallyNil(t, 10*time.Second, func() error {
			if n := len(workers(t, base).Workers); n != 1 {
				return fmt.Errorf("%s: %d workers", base, n)
			}
			return nil
		})
	}

	const requests = 8
	for i := range requests {
		body := map[string]any{"request_id": fmt.Sprintf("acked-%d", i), "token_ids": tokens(64, uint32(i))}
		if code := Post(t, survivors[i%2]+"/route", body, nil); code != http.StatusOK {
			t.Fatalf("route acked-%d: %d", i, code)
		}
	}
	// The victim must hold them to free them (it forwards a peer's free
	// through its replication edge and gossips it).
	for _, base := range append([]string{victim.BaseURL}, survivors...) {
		testutil.EventuallyNil(t, 5*time.Second, func() error {
			if n := rankActive(t, base, 1); n != requests {
				return fmt.Errorf("%s counts %d requests, want %d", base, n, requests)
			}
			return nil
		})
	}

	// All frees at once, so that (without the wait) they would share the
	// victim's open batch; the kill follows the last answer.
	var wg sync.WaitGroup
	errs := make([]error, requests)
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"request_id":"acked-%d"}`, i)
			resp, err := http.Post(victim.BaseURL+"/free", "application/json", strings.NewReader(body))
			if err != nil {
				errs[i] = err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs[i] = fmt.Errorf("status %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("free acked-%d through the victim: %v", i, err)
		}
	}
	for _, base := range survivors {
		testutil.EventuallyNil(t, 2*time.Second, func() error {
			if n := rankActive(t, base, 1); n != 0 {
				return fmt.Errorf("%s still counts %d of the %d requests the dead replica acknowledged freeing", base, n, requests)
			}
			return nil
		})
	}
}
