package test

import (
	"net/http"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
)

// Requests that are never freed (or giant prompts) push every worker over
// the queue threshold: new requests wait in the queue and are answered
// 429 with the queue's figures once they waited router-max-queue-wait —
// never 504, because the router waits longer than the queue — and
// routing recovers as soon as the backlog is freed.
func TestOverloadAnswers429AndRecovers(t *testing.T) {
	rep := StartReplica(t, func(c *config.Config) {
		c.StaticWorkers = []string{"1=http://127.0.0.1:9", "2=http://127.0.0.1:9"}
		c.MaxNumBatchedTokens = 64 // threshold 16 x 64 = 1,024 prefill tokens per worker
		c.RouterMaxQueueWait = 500 * time.Millisecond
		// Dynamo's cost spreads the two identical giants below over both
		// workers; the ttft cost would queue the second behind the first's
		// prefix on one worker, leaving the other free.
		c.RouterCost = "dynamo"
	})
	base := BaseURL(rep)
	route := func(id string, n int) (int, map[string]any) {
		var out map[string]any
		code := Post(t, base+"/route", map[string]any{"request_id": id, "token_ids": tokens(n, 7), "update_states": true}, &out)
		return code, out
	}
	// Two giant prompts that nobody frees: both workers are over the threshold.
	for _, id := range []string{"giant-1", "giant-2"} {
		if code, out := route(id, 4096); code != http.StatusOK {
			t.Fatalf("%s: %d %v", id, code, out)
		}
	}
	start := time.Now()
	code, out := route("waits", 16)
	waited := time.Since(start)
	if code != http.StatusTooManyRequests || out["queue_limit"] == nil {
		t.Fatalf("overloaded fleet answered %d %v, want 429 with queue figures", code, out)
	}
	if waited < 500*time.Millisecond {
		t.Fatalf("answered after %v, before the queue's max wait", waited)
	}
	for _, id := range []string{"giant-1", "giant-2"} {
		if code := Post(t, base+"/free", map[string]any{"request_id": id}, nil); code != http.StatusOK {
			t.Fatalf("free %s: %d", id, code)
		}
	}
	if code, out := route("after", 16); code != http.StatusOK {
		t.Fatalf("after freeing: %d %v", code, out)
	}
}
