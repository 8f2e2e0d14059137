package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/mockengine"
)

// rankBlocks is GET /workers' indexed blocks of each rank of a worker.
func rankBlocks(t testing.TB, base string, worker uint64) map[uint32]uint64 {
	t.Helper()
	code, body := Get(t, base+"/workers")
	if code != http.StatusOK {
		t.Fatalf("GET /workers: %d %s", code, body)
	}
	var w struct {
		Workers []struct {
			WorkerID uint64 `json:"worker_id"`
			Ranks    []struct {
				DpRank        uint32 `json:"dp_rank"`
				IndexedBlocks uint64 `json:"indexed_blocks"`
			} `json:"ranks"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		t.Fatal(err)
	}
	out := map[uint32]uint64{}
	for _, wk := range w.Workers {
		if wk.WorkerID == worker {
			for _, r := range wk.Ranks {
				out[r.DpRank] = r.IndexedBlocks
			}
		}
	}
	return out
}

// storedOnRank is storedEvent on a dp rank, Dynamo's RouterEvent shape.
func storedOnRank(worker uint64, rank uint32, eventID uint64, toks []uint32, base uint64) string {
	local := hashing.BlockHashes(toks, 16, hashing.Options{})
	var blocks []string
	for i, h := range local {
		blocks = append(blocks, fmt.Sprintf(`{"block_hash":%d,"tokens_hash":%d,"mm_extra_info":null}`, base+uint64(i), uint64(h)))
	}
	return fmt.Sprintf(`{"worker_id":%d,"storage_tier":"device","event":{"event_id":%d,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[%s]}},"dp_rank":%d}}`,
		worker, eventID, strings.Join(blocks, ","), rank)
}

// Dynamo-shaped JSON over the replica's NATS, through the actors: a
// cleared with dp_rank 1 empties rank 1 only; an event of a rank the
// worker does not have is refused and counted; an event of an unknown
// type leaves the rest of its batch applied; a RouterEvent inside
// Dynamo's event-plane envelope is applied.
func TestDynamoEventsArePerRank(t *testing.T) {
	rep := StartReplica(t, nil)
	base := BaseURL(rep)
	nc := connect(t, rep)
	publish(t, nc, "kvrouter.workers",
		`{"worker_id":5,"url":"http://127.0.0.1:9","data_parallel_start_rank":0,"data_parallel_size":2,"block_size":16,"total_kv_blocks":1000,"model_name":"mock"}`)
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if n := len(rankBlocks(t, base, 5)); n != 2 {
			return fmt.Errorf("%d ranks registered", n)
		}
		return nil
	})
	prompt := tokens(160, 4) // 10 blocks
	publish(t, nc, "kvrouter.kv_events", storedOnRank(5, 0, 0, prompt, 1000))
	publish(t, nc, "kvrouter.kv_events", storedOnRank(5, 1, 0, prompt, 2000))
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if got := rankBlocks(t, base, 5); got[0] != 10 || got[1] != 10 {
			return fmt.Errorf("blocks %v, want 10 on each rank", got)
		}
		return nil
	})

	publish(t, nc, "kvrouter.kv_events", `{"worker_id":5,"storage_tier":"device","event":{"event_id":1,"data":"cleared","dp_rank":1}}`)
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if got := rankBlocks(t, base, 5); got[1] != 0 {
			return fmt.Errorf("rank 1 holds %d blocks after its clear", got[1])
		}
		return nil
	})
	if got := rankBlocks(t, base, 5); got[0] != 10 {
		t.Fatalf("rank 0 holds %d blocks after rank 1's clear, want 10", got[0])
	}
	var got routeReply
	Post(t, base+"/route", map[string]any{"token_ids": prompt, "update_states": false}, &got)
	if got.WorkerID != 5 || got.DpRank != 0 || got.OverlapBlocks != 10 {
		t.Fatalf("route after rank 1's clear = %+v, want rank 0 with 10 blocks", got)
	}

	// Rank 5 of a dp=2 worker: refused, counted.
	publish(t, nc, "kvrouter.kv_events", storedOnRank(5, 5, 0, tokens(64, 9), 3000))
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if v := metricValue(t, base, `kvrouter_kv_events_dropped_total{reason="unknown_rank"}`); v != 1 {
			return fmt.Errorf("unknown_rank drops %g, want 1", v)
		}
		return nil
	})

	// A batch with an event of an unknown type: the rest is applied.
	batch := "[" + `{"worker_id":5,"event":{"event_id":2,"data":{"offloaded":{"block_hashes":[2000]}},"dp_rank":1}},` +
		storedOnRank(5, 1, 3, prompt[:64], 4000) + "]"
	publish(t, nc, "kvrouter.kv_events", batch)
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if got := rankBlocks(t, base, 5); got[1] != 4 {
			return fmt.Errorf("rank 1 holds %d blocks, want the batch's 4", got[1])
		}
		if v := metricValue(t, base, `kvrouter_kv_events_dropped_total{reason="unknown_event_type"}`); v != 1 {
			return fmt.Errorf("unknown_event_type drops %g, want 1", v)
		}
		return nil
	})

	// Dynamo's NATS event-plane envelope around a RouterEvent.
	payload := []byte(storedOnRank(5, 1, 4, prompt, 5000))
	nums := make([]string, len(payload))
	for i, c := range payload {
		nums[i] = strconv.Itoa(int(c))
	}
	publish(t, nc, "kvrouter.kv_events",
		`{"publisher_id":77,"sequence":1,"published_at":1700000000000,"payload":[`+strings.Join(nums, ",")+`]}`)
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if got := rankBlocks(t, base, 5); got[1] != 10 {
			return fmt.Errorf("rank 1 holds %d blocks after the enveloped store, want 10", got[1])
		}
		return nil
	})
}

// A dp=3 mock worker over real sockets (HTTP, embedded NATS): each rank
// caches its own prompt; rank 1's engine core restarts. Ranks 0 and 2
// keep their indexed blocks and keep getting routing hits; rank 1 starts
// empty and is hit again once it re-caches.
func TestRankRestartKeepsTheOtherRanksHits(t *testing.T) {
	rep := StartReplica(t, nil)
	base := BaseURL(rep)
	worker := StartMockWorker(t, rep, 7, func(c *mockengine.ServerConfig) { c.Engine.DPSize = 3 })
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if n := len(rankBlocks(t, base, 7)); n != 3 {
			return fmt.Errorf("%d ranks registered", n)
		}
		return nil
	})
	prompts := [][]uint32{tokens(512, 21), tokens(512, 22), tokens(512, 23)} // 32 blocks each
	complete := func(rank int) {
		t.Helper()
		var out map[string]any
		body := map[string]any{"prompt": prompts[rank], "max_tokens": 1, "dp_rank": rank}
		if code := Post(t, worker+"/v1/completions", body, &out); code != http.StatusOK {
			t.Fatalf("completion on rank %d: %d %v", rank, code, out)
		}
	}
	routesTo := func(rank int, minOverlap uint32) error {
		var got routeReply
		Post(t, base+"/route", map[string]any{"token_ids": prompts[rank], "update_states": false}, &got)
		if got.WorkerID != 7 || got.DpRank != uint32(rank) || got.OverlapBlocks < minOverlap {
			return fmt.Errorf("prompt %d routed %+v, want rank %d with >= %d blocks", rank, got, rank, minOverlap)
		}
		return nil
	}
	for rank := range 3 {
		complete(rank)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		for rank := range 3 {
			if err := routesTo(rank, 31); err != nil {
				return err
			}
		}
		return nil
	})
	before := rankBlocks(t, base, 7)

	if code := Post(t, worker+"/fault", map[string]any{"restart_rank": 1}, nil); code != http.StatusOK {
		t.Fatalf("restart rank 1: %d", code)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if got := rankBlocks(t, base, 7); got[1] != 0 {
			return fmt.Errorf("rank 1 holds %d blocks after its restart", got[1])
		}
		return nil
	})
	after := rankBlocks(t, base, 7)
	for _, rank := range []uint32{0, 2} {
		if after[rank] != before[rank] || after[rank] < 31 {
			t.Fatalf("rank %d held %d blocks before rank 1's restart, %d after", rank, before[rank], after[rank])
		}
		if err := routesTo(int(rank), 31); err != nil {
			t.Fatalf("after rank 1's restart: %v", err)
		}
	}
	// The restarted rank's stores are accepted again (its event ids start
	// from 0 after its Cleared).
	complete(1)
	testutil.EventuallyNil(t, 10*time.Second, func() error { return routesTo(1, 31) })
}
