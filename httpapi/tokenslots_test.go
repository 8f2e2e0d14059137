package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/metrics"
)

// TestTokenizeSlotsBusy: with every tokenization slot taken, a text
// prompt waits the queue timeout and gets 503 with Retry-After and a
// JSON error, counted; once a slot is free the same request is routed.
// Over a real socket.
func TestTokenizeSlotsBusy(t *testing.T) {
	cfg := actors.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Shards = 1
	r, err := actors.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	s := New(Options{Router: r, Metrics: metrics.New(), BlockSize: cfg.BlockSize, Models: testModels(t),
		Log: slog.New(slog.DiscardHandler), TokenizeConcurrency: 1, TokenizeQueueTimeout: 100 * time.Millisecond})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	post := func() (int, http.Header, map[string]any) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/overlap_scores", "application/json",
			strings.NewReader(`{"model":"qwen3","prompt":"The router hashes every block of the prompt."}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("status %d, body is not JSON: %v", resp.StatusCode, err)
		}
		return resp.StatusCode, resp.Header, out
	}

	release, err := s.tokens.acquire(context.Background()) // another prompt holds the only slot
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, hdr, out := post()
	if waited := time.Since(start); code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" ||
		!strings.Contains(out["error"].(string), "busy") || waited < 100*time.Millisecond {
		t.Fatalf("slot held: %d (Retry-After %q) %v after %v; want 503 with Retry-After after the 100ms queue timeout", code, hdr.Get("Retry-After"), out, waited)
	}
	if n := testutil.ToFloat64(s.opts.Metrics.Tokenize.Busy); n != 1 {
		t.Errorf("kvrouter_tokenize_busy_total = %v, want 1", n)
	}
	if n := s.tokens.inFlight(); n != 1 {
		t.Errorf("in flight %d while held, want 1", n)
	}
	release()
	if code, _, out := post(); code != http.StatusOK || out["prompt_tokens"] == nil {
		t.Fatalf("slot free: %d %v, want 200", code, out)
	}
	if n := s.tokens.inFlight(); n != 0 {
		t.Errorf("in flight %d after the request, want 0 (slot not given back)", n)
	}

	// A waiter gets the slot as soon as it is released, within its wait.
	release, _ = s.tokens.acquire(context.Background())
	time.AfterFunc(20*time.Millisecond, release)
	if code, _, out := post(); code != http.StatusOK {
		t.Fatalf("slot freed while waiting: %d %v, want 200", code, out)
	}
}

func TestTokenSlotsDefaults(t *testing.T) {
	ts := newTokenSlots(0, 0)
	if cap(ts.slots) != DefaultTokenizeConcurrency() || cap(ts.slots) < 1 || ts.wait != DefaultTokenizeQueueTimeout {
		t.Fatalf("defaults: %d slots, %v", cap(ts.slots), ts.wait)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts = newTokenSlots(1, time.Minute)
	release, _ := ts.acquire(ctx)
	defer release()
	cancel()
	if _, err := ts.acquire(ctx); err != context.Canceled {
		t.Fatalf("waiter whose client left: %v, want context.Canceled", err)
	}
}
