package test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
)

// withTier puts a Dynamo RouterEvent JSON on a storage tier.
func withTier(event, tier string) string {
	return strings.Replace(event, `{"worker_id":`, `{"storage_tier":"`+tier+`","worker_id":`, 1)
}

type overlapScoresReply struct {
	RequestBlocks uint32 `json:"request_blocks"`
	SharedBlocks  uint32 `json:"shared_blocks"`
	Scores        []struct {
		WorkerID                 uint64  `json:"worker_id"`
		DeviceBlocks             uint32  `json:"device_blocks"`
		SharedBeyondDeviceBlocks uint32  `json:"shared_beyond_device_blocks"`
		SharedCreditBlocks       float64 `json:"shared_credit_blocks"`
	} `json:"scores"`
}

// TestSharedCacheTierChangesRoute: over real NATS and HTTP, blocks in the
// fleet's shared cache (from a declared store, then from a worker's own
// "shared" medium) move a /route decision exactly as Dynamo's formula
// says, and a per-request shared_cache_multiplier overrides the knob.
//
// A 10-block prompt; worker 1 holds 2 of its blocks on device, worker 2
// holds 6 and 3 active decode blocks of another request (prefill done).
// Costs (credit 1, scale 1, every prompt block new on both):
//
//	no shared blocks:           1: (10−2)+10 = 18           2: (10−6)+13 = 17   → 2
//	shared 8, multiplier 0.5:   1: (10−2−0.5·6)+10 = 15     2: (10−6−0.5·2)+13 = 16 → 1
func TestSharedCacheTierChangesRoute(t *testing.T) {
	rep := StartReplica(t, func(c *config.Config) {
		c.SharedCacheWorkers = []string{"900"}
		c.SharedCacheMultiplier = 0.5
		c.RouterCost = "dynamo" // the costs below are Dynamo's formula
	})
	base := BaseURL(rep)
	nc := connect(t, rep)
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if code, body := Get(t, base+"/readyz"); code != http.StatusOK {
			return fmt.Errorf("not ready: %s", body)
		}
		return nil
	})
	publish(t, nc, "kvrouter.workers", heartbeat(1))
	publish(t, nc, "kvrouter.workers", heartbeat(2))
	// The store's heartbeat is refused: it is never a candidate.
	publish(t, nc, "kvrouter.workers", heartbeat(900))
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := len(workers(t, base).Workers); n != 2 {
			return fmt.Errorf("%d workers registered", n)
		}
		return nil
	})
	prompt := tokens(160, 5)
	publish(t, nc, "kvrouter.kv_events", storedEvent(1, 0, prompt[:32], 1000))
	publish(t, nc, "kvrouter.kv_events", storedEvent(2, 0, prompt[:96], 2000))
	busy := tokens(48, 6)
	var got routeReply
	if code := Post(t, base+"/route", map[string]any{"token_ids": busy, "request_id": "busy",
		"pinned_worker": map[string]any{"worker_id": 2, "dp_rank": 0}}, &got); code != http.StatusOK || got.WorkerID != 2 {
		t.Fatalf("pinned route: %d %+v", code, got)
	}
	if code := Post(t, base+"/prefill_done", map[string]any{"request_id": "busy"}, nil); code != http.StatusOK {
		t.Fatalf("prefill_done: %d", code)
	}

	route := func(override map[string]any) routeReply {
		body := map[string]any{"token_ids": prompt, "update_states": false}
		if override != nil {
			body["router_config_override"] = override
		}
		var r routeReply
		if code := Post(t, base+"/route", body, &r); code != http.StatusOK {
			t.Fatalf("route: %d %+v", code, r)
		}
		return r
	}
	wantRoute := func(what string, override map[string]any, worker uint64, overlap uint32) {
		t.Helper()
		testutil.EventuallyNil(t, 5*time.Second, func() error {
			r := route(override)
			// The shared credit steers the choice; it is not the chosen
			// worker's cache hit.
			if r.WorkerID != worker || r.OverlapBlocks != overlap || r.CachedTokens != uint64(overlap)*16 {
				return fmt.Errorf("%s: route = %+v, want worker %d with %d device blocks", what, r, worker, overlap)
			}
			return nil
		})
	}
	wantRoute("no shared blocks", nil, 2, 6)

	// The declared store publishes 8 blocks of the prompt as an ordinary
	// (device) event; it is indexed in the shared tier.
	publish(t, nc, "kvrouter.kv_events", storedEvent(900, 0, prompt[:128], 9000))
	wantRoute("store holds 8 blocks", nil, 1, 2)
	wantRoute("override multiplier 0", map[string]any{"shared_cache_multiplier": 0}, 2, 6)

	var scores overlapScoresReply
	if code := Post(t, base+"/overlap_scores", map[string]any{"token_ids": prompt}, &scores); code != http.StatusOK {
		t.Fatalf("overlap_scores: %d", code)
	}
	if scores.SharedBlocks != 8 || scores.RequestBlocks != 10 || len(scores.Scores) != 2 {
		t.Fatalf("overlap_scores = %+v, want shared 8 of 10 over 2 workers", scores)
	}
	for _, s := range scores.Scores {
		want := map[uint64][3]float64{1: {2, 6, 3}, 2: {6, 2, 1}}[s.WorkerID]
		if float64(s.DeviceBlocks) != want[0] || float64(s.SharedBeyondDeviceBlocks) != want[1] || s.SharedCreditBlocks != want[2] {
			t.Fatalf("worker %d row %+v, want device/beyond/credit %v", s.WorkerID, s, want)
		}
	}
	if n := len(workers(t, base).Workers); n != 2 {
		t.Fatalf("the store shows up among %d workers", n)
	}

	// The store clears: the decision goes back.
	publish(t, nc, "kvrouter.kv_events", `{"worker_id":900,"event":{"event_id":1,"dp_rank":0,"data":"cleared"}}`)
	wantRoute("store cleared", nil, 2, 6)

	// A worker's own blocks on the shared medium credit every worker too,
	// and never its own device overlap.
	publish(t, nc, "kvrouter.kv_events", withTier(storedEvent(1, 1, prompt[:128], 1100), "shared"))
	wantRoute("worker 1 shared 8 blocks", nil, 1, 2)

	// A bad tier is dropped and counted; nothing else changes.
	publish(t, nc, "kvrouter.kv_events", withTier(storedEvent(2, 1, prompt, 2100), "tape"))
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		_, m := Get(t, base+"/metrics")
		if n := metricSum(m, "kvrouter_kv_events_malformed_total"); n != 1 {
			return fmt.Errorf("%v malformed events counted, want 1", n)
		}
		return nil
	})
	wantRoute("after a bad tier", nil, 1, 2)
	// A routed request on worker 1 (effective overlap 2) loads 6 blocks
	// from the shared tier: Dynamo's shared-cache metrics. The pinned
	// request before counted 0 shared blocks.
	var routed routeReply
	if code := Post(t, base+"/route", map[string]any{"token_ids": prompt, "request_id": "r1"}, &routed); code != http.StatusOK || routed.WorkerID != 1 {
		t.Fatalf("routed: %d %+v", code, routed)
	}
	_, m := Get(t, base+"/metrics")
	if c, b := metricSum(m, "kvrouter_shared_cache_beyond_blocks_count"), metricSum(m, "kvrouter_shared_cache_beyond_blocks_sum"); c != 2 || b != 6 {
		t.Fatalf("shared beyond blocks: count %v sum %v, want 2 and 6", c, b)
	}
	if r := metricSum(m, "kvrouter_shared_cache_hit_rate_sum"); r != 0.8 {
		t.Fatalf("shared hit rate sum %v, want 0.8 (8 of 10 blocks, and 0 of 3)", r)
	}
	var bad map[string]any
	if code := Post(t, base+"/route", map[string]any{"token_ids": prompt,
		"router_config_override": map[string]any{"shared_cache_multiplier": -1}}, &bad); code != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(bad["error"]), "shared_cache_multiplier") {
		t.Fatalf("negative override: %d %v", code, bad)
	}
}
