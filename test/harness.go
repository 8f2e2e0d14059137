// Package test holds kvrouter's integration tests and the harness they
// share: real replicas (embedded NATS, real HTTP, real memberlist on
// loopback), started in-process.
package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/replica"
)

// StartReplica starts a replica on random loopback ports with a private
// data dir; mutate adjusts the config first.
func StartReplica(t testing.TB, mutate func(*config.Config)) *replica.Replica {
	t.Helper()
	cfg := config.Default()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.NATSListen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.LogLevel = "warn"
	if mutate != nil {
		mutate(&cfg)
	}
	level := slog.LevelWarn
	if os.Getenv("KVROUTER_TEST_INFO") != "" {
		level = slog.LevelInfo
	}
	if os.Getenv("KVROUTER_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := replica.Start(ctx, cfg, log)
	if err != nil {
		t.Fatalf("start replica: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rep.Shutdown(ctx); err != nil {
			// Not a failure: a test may have partitioned or killed peers
			// the leave cannot reach.
			t.Logf("shutdown replica %s: %v", rep.ID(), err)
		}
	})
	return rep
}

// Post sends a JSON body (a string is sent as is) and decodes the answer.
func Post(t testing.TB, url string, body any, out any) int {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read body: %v", url, err)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("POST %s: decode %q: %v", url, data, err)
		}
	}
	return resp.StatusCode
}

// Get fetches a URL and returns code and body.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, string(data)
}

// BaseURL of a replica's HTTP API.
func BaseURL(r *replica.Replica) string { return fmt.Sprintf("http://%s", r.HTTPAddr()) }
