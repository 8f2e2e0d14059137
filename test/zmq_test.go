package test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// TestZMQWorkerEndToEnd: a mock engine that publishes its KV events in
// vLLM's ZMQ format (heartbeats on NATS announce the endpoints) is found
// by the router, which subscribes, hashes the token ids itself, and routes
// a repeated prompt to the worker that cached it.
func TestZMQWorkerEndToEnd(t *testing.T) {
	rep := StartReplica(t, nil)
	base := BaseURL(rep)
	nc := connect(t, rep)
	for id, enc := range map[uint64]zmqevents.Encoding{1: zmqevents.EncodingArray, 2: zmqevents.EncodingMap} {
		pub, err := mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{
			Endpoint:       fmt.Sprintf("tcp://127.0.0.1:%d", testutil.FreePort(t)),
			ReplayEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", testutil.FreePort(t)),
			Encoding:       enc, BlockSize: 16, DPSize: 1,
			Heartbeats: mockengine.NewNATSPublisher(nc, "kvrouter.kv_events", "kvrouter.workers"),
			Logger:     slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pub.Close() })
		cfg := mockengine.DefaultServerConfig()
		cfg.Engine.WorkerID = kv.WorkerID(id)
		cfg.Engine.Speedup = 10
		cfg.HeartbeatInterval = 100 * time.Millisecond
		cfg.Logger = slog.New(slog.DiscardHandler)
		srv, err := mockengine.NewServer(cfg, pub)
		if err != nil {
			t.Fatal(err)
		}
		pub.TapEngine(srv.Engine())
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if n := len(workers(t, base).Workers); n != 2 {
			return fmt.Errorf("%d workers", n)
		}
		return nil
	})
	prompt := tokens(320, 42) // 20 blocks
	// The first completion lands on some worker; its KV events come back
	// over ZMQ and the router sees the prefix cached there.
	var first routeReply
	if code := Post(t, base+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2}, nil); code != 200 {
		t.Fatalf("completion: %d", code)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		Post(t, base+"/route", map[string]any{"token_ids": prompt, "update_states": false}, &first)
		if first.OverlapBlocks < 19 {
			return fmt.Errorf("overlap %d after a completion, want >= 19 of 20 blocks (events over ZMQ)", first.OverlapBlocks)
		}
		return nil
	})
	_, m := Get(t, base+"/metrics")
	if metricSum(m, "kvrouter_zmq_stored_blocks_total") < 19 {
		t.Fatalf("zmq ingestion not counted:\n%s", grepLines(m, "kvrouter_zmq"))
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
