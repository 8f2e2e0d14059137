package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/replica"
)

// StartMockWorker runs an in-process mock engine that publishes its KV
// events and heartbeats to the replica's NATS.
func StartMockWorker(t testing.TB, rep *replica.Replica, id uint64, mutate func(*mockengine.ServerConfig)) string {
	t.Helper()
	return StartMockWorkerOn(t, rep.NATSURL(), id, mutate)
}

// StartMockWorkerOn starts a mock engine publishing heartbeats and KV
// events to the NATS server at natsURL.
func StartMockWorkerOn(t testing.TB, natsURL string, id uint64, mutate func(*mockengine.ServerConfig)) string {
	t.Helper()
	cfg := mockengine.DefaultServerConfig()
	cfg.Engine.WorkerID = kv.WorkerID(id)
	cfg.Engine.Speedup = 10
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	if mutate != nil {
		mutate(&cfg)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	srv, err := mockengine.NewServer(cfg, mockengine.NewNATSPublisher(nc, "kvrouter.kv_events", "kvrouter.workers"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String()
}

func activeRequests(t testing.TB, base string) uint32 {
	var n uint32
	for _, w := range workers(t, base).Workers {
		for _, r := range w.Ranks {
			n += r.ActiveRequests
		}
	}
	return n
}

// TestProxyLifecycle sends completions through the router's proxy to mock
// workers: the stream arrives intact, the request is active while it
// streams, and it is freed on completion and on client cancellation.
func TestProxyLifecycle(t *testing.T) {
	rep := StartReplica(t, func(c *config.Config) { c.RouterTrackOutputBlocks = true })
	base := BaseURL(rep)
	StartMockWorker(t, rep, 1, nil)
	StartMockWorker(t, rep, 2, nil)
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if n := len(workers(t, base).Workers); n != 2 {
			return fmt.Errorf("%d workers", n)
		}
		return nil
	})
	prompt := tokens(512, 4)

	// A streamed completion.
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 40, "stream": true})
	resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("status %d, request id %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}
	chunks, done := 0, false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "data: [DONE]":
			done = true
		case strings.HasPrefix(line, "data: {"):
			chunks++
		}
	}
	resp.Body.Close()
	if chunks != 40 || !done {
		t.Fatalf("got %d chunks, done=%v; want 40 and [DONE]", chunks, done)
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := activeRequests(t, base); n != 0 {
			return fmt.Errorf("%d requests still active after completion", n)
		}
		return nil
	})

	// The same prompt again lands where its prefix is cached.
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		var got routeReply
		Post(t, base+"/route", map[string]any{"token_ids": prompt, "update_states": false}, &got)
		if got.OverlapBlocks < 31 {
			return fmt.Errorf("overlap %d after the first completion, want >= 31 of 32 blocks", got.OverlapBlocks)
		}
		return nil
	})

	// A client that walks away mid-stream: freed, nothing leaks.
	ctx, cancel := context.WithCancel(context.Background())
	body, _ = json.Marshal(map[string]any{"prompt": tokens(512, 5), "max_tokens": 2000, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 5; i++ { // read a few tokens
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if n := activeRequests(t, base); n != 1 {
		t.Fatalf("%d active requests mid-stream, want 1", n)
	}
	cancel()
	resp.Body.Close()
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := activeRequests(t, base); n != 0 {
			return fmt.Errorf("%d requests still active after cancel", n)
		}
		return nil
	})

	// Non-streamed completion, and the tokenizer-less refusals.
	var out struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if code := Post(t, base+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 4}, &out); code != 200 || out.Usage.PromptTokens != 512 {
		t.Fatalf("non-streamed: code %d usage %+v", code, out.Usage)
	}
	for _, ep := range []string{"/v1/chat/completions", "/v1/completions"} {
		var e struct{ Error string }
		if code := Post(t, base+ep, `{"prompt":"hello","messages":[]}`, &e); code != 400 || !strings.Contains(e.Error, "tokenizer") {
			t.Fatalf("%s with text: %d %q", ep, code, e.Error)
		}
	}
}

// TestProxyRetriesAnotherWorker registers a worker whose URL refuses
// connections: the proxy retries once on the live worker.
func TestProxyRetriesAnotherWorker(t *testing.T) {
	rep := StartReplica(t, nil)
	base := BaseURL(rep)
	StartMockWorker(t, rep, 1, nil)
	deadURL := "http://" + testutil.FreeAddr(t)
	if code := Post(t, base+"/workers", map[string]any{"worker_id": 99, "url": deadURL}, nil); code != 200 {
		t.Fatalf("register: %d", code)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if n := len(workers(t, base).Workers); n != 2 {
			return fmt.Errorf("%d workers", n)
		}
		return nil
	})
	for i := 0; i < 6; i++ {
		var out map[string]any
		if code := Post(t, base+"/v1/completions", map[string]any{"prompt": tokens(64, uint32(i)), "max_tokens": 2}, &out); code != 200 {
			t.Fatalf("completion %d: %d %v", i, code, out)
		}
	}
	if n := activeRequests(t, base); n != 0 {
		t.Fatalf("%d requests leaked after retries", n)
	}
	// With only dead workers, the answer is a clear 502 and nothing leaks.
	lonely := StartReplica(t, func(c *config.Config) { c.StaticWorkers = []string{"7=" + deadURL, "8=" + deadURL} })
	lbase := BaseURL(lonely)
	var e struct{ Error string }
	if code := Post(t, lbase+"/v1/completions", map[string]any{"prompt": tokens(64, 1), "max_tokens": 2}, &e); code != http.StatusBadGateway || e.Error == "" {
		t.Fatalf("all workers dead: %d %q", code, e.Error)
	}
	if n := activeRequests(t, lbase); n != 0 {
		t.Fatalf("%d requests leaked after a 502", n)
	}
}
