package mockengine

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
)

// A rank's engine core restarting empties that rank only: its requests
// fail, its cache is empty, its event ids start again from 0 with a
// Cleared, and the worker's other ranks keep their requests, caches and
// event numbering.
func TestRankRestartsOnItsOwn(t *testing.T) {
	var events []kv.Event
	cfg := smallConfig(4, 64)
	cfg.DPSize = 3
	e, err := NewEngine(cfg, func(ev kv.Event) { events = append(events, ev) })
	if err != nil {
		t.Fatal(err)
	}
	// Warm every rank's cache (the engine is not running: step by hand).
	for dp, rr := range e.ranks {
		if err := rr.rank.Add(Request{ID: "warm", Prompt: seqTokens(100*dp, 16), MaxTokens: 1}); err != nil {
			t.Fatal(err)
		}
		drain(t, rr.rank)
	}
	before := map[uint32]uint64{} // next event id per rank
	for _, ev := range events {
		before[ev.Worker.DpRank] = ev.EventID + 1
	}
	events = nil
	s0, err := e.Submit(Request{Prompt: seqTokens(0, 16), MaxTokens: 4}, 0)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := e.Submit(Request{Prompt: seqTokens(100, 16), MaxTokens: 4}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.RestartRank(1); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Next(context.Background()); !errors.Is(err, ErrRankRestarted) {
		t.Fatalf("rank 1's request after its restart: %v", err)
	}
	if len(events) != 1 || events[0].Kind != kv.EventCleared || events[0].Worker != (kv.WorkerWithDpRank{WorkerID: 7, DpRank: 1}) || events[0].EventID != 0 {
		t.Fatalf("restart events %+v, want rank 1's Cleared numbered 0", events)
	}
	st := e.Stats()
	if st[1].CachedBlocks != 0 || st[1].Running+st[1].Waiting != 0 || st[1].Restarts != 1 {
		t.Fatalf("rank 1 after restart: %+v", st[1])
	}
	for _, dp := range []int{0, 2} {
		if st[dp].CachedBlocks != 4 || st[dp].Restarts != 0 {
			t.Fatalf("rank %d touched by rank 1's restart: %+v", dp, st[dp])
		}
	}
	if st[0].Waiting != 1 || s0 == nil {
		t.Fatalf("rank 0's request lost: %+v", st[0])
	}
	// The restarted rank numbers its next events after the Cleared; rank
	// 2's numbering goes on.
	events = nil
	for _, dp := range []int{1, 2} {
		rr := e.ranks[dp]
		if err := rr.rank.Add(Request{ID: "again", Prompt: seqTokens(500, 8), MaxTokens: 1}); err != nil {
			t.Fatal(err)
		}
		drain(t, rr.rank)
	}
	if events[0].Worker.DpRank != 1 || events[0].EventID != 1 {
		t.Fatalf("rank 1's first event after the restart %+v, want id 1", events[0])
	}
	for _, ev := range events {
		if ev.Worker.DpRank == 2 && ev.EventID < before[2] {
			t.Fatalf("rank 2's event ids went back: %+v (was at %d)", ev, before[2])
		}
	}
	if err := e.RestartRank(3); !errors.Is(err, ErrBadDpRank) {
		t.Fatalf("restart of rank 3 of 3: %v", err)
	}
}

// POST /fault restarts or resets one rank for a worker in another process.
func TestFaultRestartsOneRank(t *testing.T) {
	pub := &fakePublisher{}
	w := startWorker(t, func(c *ServerConfig) { c.Engine.DPSize = 3 }, pub)
	post := func(body string) int {
		resp, err := http.Post(w.url+"/fault", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(`{"restart_rank":1}`); code != http.StatusOK {
		t.Fatalf("restart_rank answered %d", code)
	}
	if code := post(`{"reset_rank":2}`); code != http.StatusOK {
		t.Fatalf("reset_rank answered %d", code)
	}
	for _, bad := range []string{`{"restart_rank":3}`, `{"restart_rank":-1}`, `{"restart":1}`} {
		if code := post(bad); code != http.StatusBadRequest {
			t.Fatalf("%s answered %d", bad, code)
		}
	}
	testutil.Eventually(t, 5*time.Second, "the two ranks' Cleared published", func() bool {
		evs, _ := pub.snapshot()
		var ranks []uint32
		for _, ev := range evs {
			if ev.Kind == kv.EventCleared {
				ranks = append(ranks, ev.Worker.DpRank)
			}
		}
		return len(ranks) == 2 && ranks[0] == 1 && ranks[1] == 2
	})
}
