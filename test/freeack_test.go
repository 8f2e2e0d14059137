package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kvclient"
)

// TestAcknowledgedFreeSurvivesKill9: a replica acknowledges frees of
// requests its peers routed (over HTTP, unary gRPC and a gRPC Lifecycle
// stream) and is killed (SIGKILL: no leave, no flush) right after the
// last answer. The frees still reach the survivors, which
// count none of the requests afterwards, well before anything else would
// remove them (the stale expiry is an hour; the dead replica's own
// requests are not these). The batch interval is long (200 ms) so that a
// free acknowledged before its gossip left would still be waiting in the
// dead replica's batch. (One path's wait sends the other paths' frees
// too, as they share the batch: grpcapi's TestAcknowledgementsWaitForGossip
// checks that each path waits.)
func TestAcknowledgedFreeSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 replica processes")
	}
	c := startProcessClusterWith(t, bench.ProcessClusterOptions{Replicas: 3, GRPC: true,
		Args: []string{"--heartbeat-timeout", "1m", "--log-level", "warn", "--cluster-batch-interval", "200ms"}})
	nc, err := nats.Connect(c.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// One worker per path, so a count left behind names its path.
	paths := []string{"HTTP /free", "gRPC Free", "gRPC Lifecycle stream"}
	for k := range paths {
		publish(t, nc, "kvrouter.workers", heartbeat(uint64(k+1)))
	}
	// The first replica embeds NATS: the victim is the last one.
	survivors := []string{c.Replicas[0].BaseURL, c.Replicas[1].BaseURL}
	victim := c.Replicas[2]
	for _, r := range c.Replicas {
		base := r.BaseURL
		testutil.EventuallyNil(t, 10*time.Second, func() error {
			if n := len(workers(t, base).Workers); n != len(paths) {
				return fmt.Errorf("%s: %d workers", base, n)
			}
			return nil
		})
	}

	const perPath = 6
	requests := len(paths) * perPath
	for i := range requests {
		body := map[string]any{"request_id": fmt.Sprintf("acked-%d", i), "token_ids": tokens(64, uint32(i)),
			"pinned_worker": map[string]any{"worker_id": i/perPath + 1, "dp_rank": 0}}
		if code := Post(t, survivors[i%2]+"/route", body, nil); code != http.StatusOK {
			t.Fatalf("route acked-%d: %d", i, code)
		}
	}
	// The victim must hold them to free them (it forwards a peer's free
	// through its replication edge and gossips it).
	for _, base := range append([]string{victim.BaseURL}, survivors...) {
		testutil.EventuallyNil(t, 5*time.Second, func() error {
			for k := range paths {
				if n := rankActive(t, base, uint64(k+1)); n != perPath {
					return fmt.Errorf("%s counts %d requests on worker %d, want %d", base, n, k+1, perPath)
				}
			}
			return nil
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := kvclient.Dial(victim.GRPCAddr, kvclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	stream, err := client.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	frees := []func(id string) error{
		func(id string) error {
			resp, err := http.Post(victim.BaseURL+"/free", "application/json", strings.NewReader(fmt.Sprintf(`{"request_id":%q}`, id)))
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("HTTP status %d", resp.StatusCode)
			}
			return nil
		},
		func(id string) error { return client.Free(ctx, id) },
		func(id string) error { return stream.Free(ctx, id) },
	}
	// All frees at once, so that (without the wait) they would share the
	// victim's open batch; the kill follows the last answer.
	var wg sync.WaitGroup
	errs := make([]error, requests)
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = frees[i/perPath](fmt.Sprintf("acked-%d", i))
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
			for k, path := range paths {
				if n := rankActive(t, base, uint64(k+1)); n != 0 {
					return fmt.Errorf("%s still counts %d of the %d requests the dead replica acknowledged freeing (%s)", base, n, perPath, path)
				}
			}
			return nil
		})
	}
}
