package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/replica"
)

func connect(t testing.TB, rep *replica.Replica) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(rep.NATSURL())
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func publish(t testing.TB, nc *nats.Conn, subject, payload string) {
	t.Helper()
	if err := nc.Publish(subject, []byte(payload)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func heartbeat(id uint64) string {
	return fmt.Sprintf(`{"worker_id":%d,"url":"http://127.0.0.1:9","data_parallel_start_rank":0,"data_parallel_size":1,"block_size":16,"total_kv_blocks":1000,"model_name":"mock"}`, id)
}

func tokens(n int, salt uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = salt*1000 + uint32(i)
	}
	return out
}

// storedEvent is a Dynamo RouterEvent JSON for a chain of blocks whose
// engine hashes are base+i.
func storedEvent(worker uint64, eventID uint64, toks []uint32, base uint64) string {
	local := hashing.BlockHashes(toks, 16, hashing.Options{})
	var blocks []string
	for i, h := range local {
		blocks = append(blocks, fmt.Sprintf(`{"block_hash":%d,"tokens_hash":%d,"mm_extra_info":null}`, base+uint64(i), uint64(h)))
	}
	return fmt.Sprintf(`{"worker_id":%d,"event":{"event_id":%d,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[%s]}}}}`,
		worker, eventID, strings.Join(blocks, ","))
}

type routeReply struct {
	WorkerID      uint64 `json:"worker_id"`
	DpRank        uint32 `json:"dp_rank"`
	OverlapBlocks uint32 `json:"overlap_blocks"`
	CachedTokens  uint64 `json:"cached_tokens"`
	Error         string `json:"error"`
}

type workersReply struct {
	Workers []struct {
		WorkerID uint64 `json:"worker_id"`
		Ranks    []struct {
			IndexedBlocks  uint64 `json:"indexed_blocks"`
			ActiveRequests uint32 `json:"active_requests"`
		} `json:"ranks"`
	} `json:"workers"`
	IndexDigest uint64 `json:"index_digest"`
}

// workers is GET /workers with the index digest (?digest=1).
func workers(t testing.TB, base string) workersReply {
	t.Helper()
	code, body := Get(t, base+"/workers?digest=1")
	if code != http.StatusOK {
		t.Fatalf("GET /workers: %d %s", code, body)
	}
	var w workersReply
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestEventsDriveRouting is the service's end-to-end path: heartbeats
// register workers, Dynamo-shaped KV events over NATS fill the index, and
// /route follows the cached prefix — then a removal shortens it.
func TestEventsDriveRouting(t *testing.T) {
	rep := StartReplica(t, nil)
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
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := len(workers(t, base).Workers); n != 2 {
			return fmt.Errorf("%d workers registered", n)
		}
		return nil
	})
	prompt := tokens(200, 3) // 12 full blocks + 8 tokens
	publish(t, nc, "kvrouter.kv_events", storedEvent(1, 0, prompt[:160], 5000))
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		var got routeReply
		Post(t, base+"/route", map[string]any{"token_ids": prompt, "update_states": false}, &got)
		if got.WorkerID != 1 || got.OverlapBlocks != 10 || got.CachedTokens != 160 {
			return fmt.Errorf("route = %+v, want worker 1 with 10 blocks", got)
		}
		return nil
	})
	publish(t, nc, "kvrouter.kv_events",
		`{"worker_id":1,"event":{"event_id":1,"dp_rank":0,"data":{"removed":{"block_hashes":[5005]}}}}`)
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		var got routeReply
		Post(t, base+"/route", map[string]any{"token_ids": prompt, "update_states": false}, &got)
		if got.WorkerID != 1 || got.OverlapBlocks != 5 {
			return fmt.Errorf("route after removal = %+v, want worker 1 with 5 blocks", got)
		}
		return nil
	})
	_, metrics := Get(t, base+"/metrics")
	for _, want := range []string{
		`kvrouter_kv_events_applied_total{kind="stored"} 1`,
		`kvrouter_kv_events_applied_total{kind="removed"} 1`,
		`kvrouter_decisions_total{outcome="query"}`,
		`kvrouter_worker_indexed_blocks{dp_rank="0",worker_id="1"} 5`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestGarbageIsRefusedAndChangesNothing posts garbage to every endpoint
// and the event subject; every answer is a clear JSON error, the process
// keeps serving and the index is unchanged.
func TestGarbageIsRefusedAndChangesNothing(t *testing.T) {
	rep := StartReplica(t, func(c *config.Config) { c.MaxBodyBytes = 1 << 16 })
	base := BaseURL(rep)
	nc := connect(t, rep)
	publish(t, nc, "kvrouter.workers", heartbeat(1))
	prompt := tokens(64, 1)
	publish(t, nc, "kvrouter.kv_events", storedEvent(1, 0, prompt, 100))
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		w := workers(t, base)
		if len(w.Workers) != 1 || w.Workers[0].Ranks[0].IndexedBlocks != 4 {
			return fmt.Errorf("not indexed yet: %+v", w)
		}
		return nil
	})
	before := workers(t, base).IndexDigest

	garbage := []string{``, `{`, `[]`, `null`, `"x"`, `{"token_ids":"abc"}`, `{"token_ids":[-1]}`,
		`{"token_ids":[1.5]}`, `{"token_ids":[]}`, `{"request_id":7}`,
		`{"worker_id":"one"}`, "\x00\xff\xfe", `{"token_ids":[99999999999]}`}
	endpoints := []string{"/route", "/prefill_done", "/free", "/overlap_scores", "/potential_loads", "/workers", "/v1/completions"}
	for _, ep := range endpoints {
		for _, g := range garbage {
			var body struct {
				Error string `json:"error"`
			}
			code := Post(t, base+ep, g, &body)
			if code < 400 || code >= 500 || body.Error == "" {
				t.Errorf("POST %s %q: code %d error %q, want a 4xx with a JSON error", ep, g, code, body.Error)
			}
		}
	}
	// Wrong types in optional fields are errors too, not ignored.
	for _, g := range []string{`{"token_ids":[1],"pinned_worker":"w"}`, `{"token_ids":[1],"update_states":"yes"}`,
		`{"token_ids":[1],"allowed_worker_ids":[-1]}`, `{"token_ids":[1],"router_config_override":{"router_temperature":-1}}`} {
		if code := Post(t, base+"/route", g, nil); code != http.StatusBadRequest {
			t.Errorf("POST /route %s: code %d, want 400", g, code)
		}
	}
	huge := `{"token_ids":[` + strings.Repeat("1,", 1<<16) + `1]}`
	if code := Post(t, base+"/route", huge, nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: code %d, want 413", code)
	}
	if code := Post(t, base+"/free", `{"request_id":"never-routed"}`, nil); code != http.StatusNotFound {
		t.Errorf("free of an unknown request: %d, want 404", code)
	}
	for _, g := range []string{``, `{`, `{"worker_id":1}`, `{"worker_id":1,"event":{"data":{"stored":{"blocks":"x"}}}}`,
		`{"worker_id":1,"event":{"event_id":1,"data":{"removed":{"block_hashes":[1e99]}}}}`, "\xff\x00garbage"} {
		publish(t, nc, "kvrouter.kv_events", g)
	}
	publish(t, nc, "kvrouter.workers", `{"worker_id":"x"}`)
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		_, m := Get(t, base+"/metrics")
		if n := metricSum(m, "kvrouter_kv_events_malformed_total"); n < 5 {
			return fmt.Errorf("%v malformed events counted, want >= 5", n)
		}
		return nil
	})
	if after := workers(t, base); after.IndexDigest != before || after.Workers[0].Ranks[0].IndexedBlocks != 4 {
		t.Fatalf("garbage changed the index: digest %d -> %d, %+v", before, after.IndexDigest, after.Workers[0])
	}
	// A valid event after the garbage proves the subscription survived.
	publish(t, nc, "kvrouter.kv_events", storedEvent(1, 1, tokens(32, 9), 900))
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := workers(t, base).Workers[0].Ranks[0].IndexedBlocks; n != 6 {
			return fmt.Errorf("%d blocks indexed, want 6", n)
		}
		return nil
	})
	if code, _ := Get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatal("replica stopped serving")
	}
}

// metricSum adds every sample of a metric family in a text exposition.
func metricSum(exposition, name string) float64 {
	var sum float64
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := strings.TrimPrefix(line, name)
		if rest != "" && rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		var v float64
		if _, err := fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v); err == nil {
			sum += v
		}
	}
	return sum
}

// TestStatusWalksTheIndexOnlyWhenAsked: the index digest is a walk of the
// whole index that stalls lookups, so a metrics scrape and a plain GET
// /workers must not compute it; ?digest=1 does, and a bad value is a 400.
func TestStatusWalksTheIndexOnlyWhenAsked(t *testing.T) {
	rep := StartReplica(t, nil)
	base := BaseURL(rep)
	nc := connect(t, rep)
	publish(t, nc, "kvrouter.workers", heartbeat(1))
	publish(t, nc, "kvrouter.kv_events", storedEvent(1, 0, tokens(160, 5), 7000))
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if w := workers(t, base); len(w.Workers) != 1 || w.Workers[0].Ranks[0].IndexedBlocks != 10 {
			return fmt.Errorf("not indexed yet: %+v", w.Workers)
		}
		return nil
	})
	walks := func() float64 {
		_, m := Get(t, base+"/metrics")
		return metricSum(m, "kvrouter_index_digests_total")
	}
	before := walks()
	if before < 1 {
		t.Fatalf("index_digests = %v after GET /workers?digest=1, want >= 1", before)
	}
	for range 3 {
		walks()
	}
	code, body := Get(t, base+"/workers")
	if code != http.StatusOK || strings.Contains(body, "index_digest") {
		t.Fatalf("GET /workers = %d %s, want 200 without index_digest", code, body)
	}
	if after := walks(); after != before {
		t.Fatalf("scrapes and a plain GET /workers walked the index: index_digests %v -> %v", before, after)
	}
	if d := workers(t, base).IndexDigest; d == 0 {
		t.Fatal("GET /workers?digest=1 has no index_digest")
	}
	if after := walks(); after <= before {
		t.Fatalf("index_digests %v -> %v after GET /workers?digest=1, want more (one per shard)", before, after)
	}
	code, body = Get(t, base+"/workers?digest=maybe")
	if code != http.StatusBadRequest || !strings.Contains(body, `"error"`) {
		t.Fatalf("GET /workers?digest=maybe = %d %s, want a 400 JSON error", code, body)
	}
}
