package grpcapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/internal/testutil"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// TestAcknowledgementsWaitForGossip: a free or prefill_done over unary
// gRPC, a Lifecycle stream and HTTP is applied at once but answered only
// once Router.Gossiped (the cluster's wait for the step's gossip to leave)
// returns; meanwhile the stream answers its other calls. The gossip wait
// here is the router's hook, held until the test releases it.
func TestAcknowledgementsWaitForGossip(t *testing.T) {
	release := make(chan struct{})
	var waits atomic.Int64
	e := newEnv(t, envOptions{workers: 1, router: func(c *actors.Config) {
		c.Gossiped = func(ctx context.Context) error {
			waits.Add(1)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}})
	// Released last thing at the latest, so that a failing run does not
	// leave the servers' handlers waiting while they stop.
	releaseAll := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseAll)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 5 {
		id := fmt.Sprintf("g%d", i)
		if _, err := e.client.Route(ctx, &pb.RouteRequest{RequestId: id, TokenIds: prompt(32, uint32(i))}); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := e.client.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan string, 4)
	call := func(name string, f func() error) {
		go func() {
			if err := f(); err != nil {
				answered <- name + ": " + err.Error()
				return
			}
			answered <- name
		}()
	}
	call("unary Free", func() error { return e.client.Free(ctx, "g0") })
	call("unary PrefillDone", func() error { return e.client.PrefillDone(ctx, "g1") })
	call("stream Free", func() error { return stream.Free(ctx, "g2") })
	call("HTTP /free", func() error {
		resp, err := http.Post(e.httpURL+"/free", "application/json", strings.NewReader(`{"request_id":"g3"}`))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	testutil.Eventually(t, 5*time.Second, "every call waiting for its gossip", func() bool { return waits.Load() >= 4 })
	// The frees are done already: only their answers wait.
	ws, err := e.client.Workers(ctx)
	if err != nil || ws.TrackedRequests != 2 {
		t.Fatalf("while the answers wait: tracked %d, want 2 (g1 and g4) (%v)", ws.GetTrackedRequests(), err)
	}
	// The stream goes on: a route on it is answered meanwhile.
	if _, err := stream.Route(ctx, &pb.RouteRequest{RequestId: "g5", TokenIds: prompt(32, 5)}); err != nil {
		t.Fatalf("route on the stream while an answer waits: %v", err)
	}
	select {
	case a := <-answered:
		t.Fatalf("%s answered before its gossip left", a)
	case <-time.After(50 * time.Millisecond):
	}
	releaseAll()
	for range 4 {
		select {
		case a := <-answered:
			if strings.Contains(a, ":") {
				t.Fatal(a)
			}
		case <-ctx.Done():
			t.Fatal("an answer never came after the gossip left")
		}
	}
}
