package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

func validRouteConfig() RouteLoadConfig {
	return RouteLoadConfig{
		URL: "http://127.0.0.1:1", Workers: 4, Tokens: 256, PrefixTokens: 128, Groups: 2, Prompts: 4,
		BlockSize: 16, BusyPerWorker: 1, BusyTokens: 64, UpdateStates: true, Timeout: time.Second, Seed: 1,
	}
}

func TestRouteLoadConfigValidate(t *testing.T) {
	if err := validRouteConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mut  func(*RouteLoadConfig)
		want string
	}{
		{func(c *RouteLoadConfig) { c.URL = "https://x:1" }, "https"},
		{func(c *RouteLoadConfig) { c.AdminURL = "localhost:9" }, "admin target URL"},
		{func(c *RouteLoadConfig) { c.Tokens = 0 }, "tokens must be at least 1"},
		{func(c *RouteLoadConfig) { c.BlockSize = 0 }, "block size"},
		{func(c *RouteLoadConfig) { c.Prompts = 0 }, "prompts"},
		{func(c *RouteLoadConfig) { c.Timeout = 0 }, "timeout"},
		{func(c *RouteLoadConfig) { c.Workers = 0 }, "workers"},
		{func(c *RouteLoadConfig) { c.Groups = 0 }, "groups"},
		{func(c *RouteLoadConfig) { c.PrefixTokens = 257 }, "prefix tokens must be in 0..tokens"},
		{func(c *RouteLoadConfig) { c.PrefixTokens = 8 }, "at least one block"},
		{func(c *RouteLoadConfig) { c.BusyPerWorker = -1 }, "busy requests"},
		{func(c *RouteLoadConfig) { c.BusyTokens = 0 }, "busy tokens"},
	} {
		cfg := validRouteConfig()
		c.mut(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
	// Without setup the fleet's shape does not matter.
	cfg := validRouteConfig()
	cfg.NoSetup, cfg.Workers, cfg.Groups = true, 0, 0
	if err := cfg.Validate(); err != nil {
		t.Errorf("no-setup config rejected: %v", err)
	}
}

func TestRoutePrompts(t *testing.T) {
	cfg := validRouteConfig()
	prefixes, prompts := RoutePrompts(cfg)
	if len(prefixes) != 2 || len(prompts) != 4 {
		t.Fatalf("%d prefixes, %d prompts", len(prefixes), len(prompts))
	}
	for p, pr := range prompts {
		if len(pr) != cfg.Tokens {
			t.Errorf("prompt %d has %d tokens", p, len(pr))
		}
		if !slices.Equal(pr[:cfg.PrefixTokens], prefixes[p%2]) {
			t.Errorf("prompt %d does not start with prefix %d", p, p%2)
		}
	}
	if slices.Equal(prefixes[0], prefixes[1]) || slices.Equal(prompts[0], prompts[2]) {
		t.Error("groups or prompts repeat")
	}
	_, again := RoutePrompts(cfg)
	if !slices.EqualFunc(prompts, again, slices.Equal) {
		t.Error("the same seed gave other prompts")
	}
}

func TestPrefixEvents(t *testing.T) {
	prefix := make([]uint32, 40) // 2 full blocks of 16, 8 tokens left over
	for i := range prefix {
		prefix[i] = uint32(i + 1)
	}
	evs := PrefixEvents(7, prefix, 16, 100)
	if len(evs) != 2 || evs[0].Kind != kv.EventCleared || evs[1].Kind != kv.EventStored {
		t.Fatalf("events %+v, want a clear then a store", evs)
	}
	if evs[0].EventID != 100 || evs[1].EventID != 101 || evs[1].Worker.WorkerID != 7 || evs[1].HasParent {
		t.Errorf("ids or worker wrong: %+v", evs)
	}
	local := hashing.BlockHashes(prefix, 16, hashing.Options{})
	if len(evs[1].Blocks) != 2 || evs[1].Blocks[0].TokensHash != local[0] || evs[1].Blocks[1].TokensHash != local[1] {
		t.Errorf("stored blocks %+v, want the prompt's 2 block hashes %v", evs[1].Blocks, local)
	}
	for _, ev := range evs {
		if err := ev.Validate(); err != nil {
			t.Error(err)
		}
	}
}

// fakeRouter is the HTTP API surface the harness uses, with a record of
// what it was asked.
type fakeRouter struct {
	mu        sync.Mutex
	workers   map[uint64]bool
	active    map[string]bool
	routes    int
	queryOnly int
	frees     int
	badBodies []string
}

func newFakeRouter(t *testing.T) (*fakeRouter, *httptest.Server) {
	f := &fakeRouter{workers: map[uint64]bool{}, active: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /workers", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			WorkerID  uint64 `json:"worker_id"`
			BlockSize int    `json:"block_size"`
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		if b.BlockSize != 16 {
			http.Error(w, `{"error":"block size"}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.workers[b.WorkerID] = true
		f.mu.Unlock()
		fmt.Fprint(w, `{"registered":true}`)
	})
	mux.HandleFunc("GET /workers", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var parts []string
		for id := range f.workers {
			parts = append(parts, fmt.Sprintf(`{"worker_id":%d,"ranks":[{"dp_rank":0,"indexed_blocks":0}]}`, id))
		}
		fmt.Fprintf(w, `{"workers":[%s]}`, strings.Join(parts, ","))
	})
	mux.HandleFunc("DELETE /workers/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.ParseUint(r.PathValue("id"), 10, 64)
		f.mu.Lock()
		delete(f.workers, id)
		f.mu.Unlock()
		fmt.Fprint(w, `{"removed":true}`)
	})
	mux.HandleFunc("POST /route", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			RequestID    string   `json:"request_id"`
			UpdateStates *bool    `json:"update_states"`
			TokenIDs     []uint32 `json:"token_ids"`
		}
		err := json.NewDecoder(r.Body).Decode(&b)
		f.mu.Lock()
		defer f.mu.Unlock()
		if err != nil || b.UpdateStates == nil || len(b.TokenIDs) == 0 || (*b.UpdateStates && b.RequestID == "") {
			f.badBodies = append(f.badBodies, fmt.Sprint(err, b.RequestID))
			http.Error(w, `{"error":"bad"}`, http.StatusBadRequest)
			return
		}
		f.routes++
		if *b.UpdateStates {
			if f.active[b.RequestID] {
				f.badBodies = append(f.badBodies, "duplicate id "+b.RequestID)
			}
			f.active[b.RequestID] = true
		} else {
			f.queryOnly++
		}
		fmt.Fprint(w, `{"worker_id":1,"dp_rank":0,"overlap_blocks":0,"cached_tokens":0}`)
	})
	mux.HandleFunc("POST /free", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			RequestID string `json:"request_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.active[b.RequestID] {
			http.Error(w, `{"error":"unknown"}`, http.StatusNotFound)
			return
		}
		delete(f.active, b.RequestID)
		f.frees++
		fmt.Fprint(w, `{}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func TestRouteTargetUpdateStatesFreesEveryDecision(t *testing.T) {
	f, srv := newFakeRouter(t)
	cfg := validRouteConfig()
	cfg.URL, cfg.Workers, cfg.BusyPerWorker, cfg.Cleanup = srv.URL, 3, 2, true
	target, err := PrepareRouteTarget(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if target.Setup.Registered != 3 || target.Setup.BusyRequests != 6 || target.Setup.EventsSent {
		t.Errorf("setup %+v, want 3 workers, 6 busy requests, no events", target.Setup)
	}
	// Two steps: request ids must not collide across them.
	for range 2 {
		res, err := target.Run(context.Background(), OpenLoopConfig{Rate: 1000, Duration: 20 * time.Millisecond, MaxInFlight: 2, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if res.Scheduled != 20 || res.OK != 20 || res.Failed() != 0 {
			t.Fatalf("scheduled %d ok %d errors %v (first: %s)", res.Scheduled, res.OK, res.Errors, target.FirstError())
		}
	}
	f.mu.Lock()
	routes, frees, active, bad := f.routes, f.frees, len(f.active), f.badBodies
	f.mu.Unlock()
	// 6 busy + 40 decisions routed with update_states, 1 query-only
	// sample; every decision freed, only the busy ones still active.
	if routes != 47 || frees != 40 || active != 6 || len(bad) > 0 {
		t.Fatalf("routes %d frees %d active %d bad %v; want 47 40 6 none", routes, frees, active, bad)
	}
	if err := target.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.active) != 0 || len(f.workers) != 0 {
		t.Errorf("after Close: %d requests active, %d workers registered; want none", len(f.active), len(f.workers))
	}
}

func TestRouteTargetQueryOnly(t *testing.T) {
	f, srv := newFakeRouter(t)
	cfg := validRouteConfig()
	cfg.URL, cfg.UpdateStates, cfg.BusyPerWorker = srv.URL, false, 0
	target, err := PrepareRouteTarget(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close(context.Background())
	res, err := target.Run(context.Background(), OpenLoopConfig{Rate: 1000, Duration: 10 * time.Millisecond, MaxInFlight: 1})
	if err != nil || res.OK != 10 {
		t.Fatalf("ok %d, %v (%v)", res.OK, err, res.Errors)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.queryOnly != 11 || f.frees != 0 || f.routes != 11 {
		t.Errorf("%d routes, %d query-only, %d frees; want 11 11 0", f.routes, f.queryOnly, f.frees)
	}
	// Without Cleanup the workers stay registered.
	if len(f.workers) != 4 {
		t.Errorf("%d workers registered, want 4", len(f.workers))
	}
}

func TestRouteTargetReportsFailuresByStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/route" {
			var b struct {
				UpdateStates bool `json:"update_states"`
			}
			_ = json.NewDecoder(r.Body).Decode(&b)
			if !b.UpdateStates {
				fmt.Fprint(w, `{"worker_id":1}`)
				return
			}
			http.Error(w, `{"error":"no eligible worker"}`, http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	cfg := validRouteConfig()
	cfg.URL, cfg.NoSetup = srv.URL, true
	target, err := PrepareRouteTarget(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close(context.Background())
	res, err := target.Run(context.Background(), OpenLoopConfig{Rate: 1000, Duration: 5 * time.Millisecond, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK != 0 || res.Errors["route 503"] != 5 {
		t.Fatalf("ok %d errors %v, want 5 x route 503", res.OK, res.Errors)
	}
	if !strings.Contains(target.FirstError(), "503") || !strings.Contains(target.FirstError(), "no eligible worker") {
		t.Errorf("first error %q does not name the status", target.FirstError())
	}
}

func TestPrepareRouteTargetExplainsSetupFailure(t *testing.T) {
	_, srv := newFakeRouter(t)
	cfg := validRouteConfig()
	cfg.URL, cfg.BlockSize, cfg.PrefixTokens = srv.URL, 32, 64 // the fake router wants 16
	_, err := PrepareRouteTarget(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "register worker") || !strings.Contains(err.Error(), "400") {
		t.Fatalf("error %v, want the rejected registration with its status", err)
	}
}

// TestRouteTargetAdminURL sends the /workers calls to a separate admin
// listener and nothing else.
func TestRouteTargetAdminURL(t *testing.T) {
	f, srv := newFakeRouter(t)
	var dataWorkers int
	var mu sync.Mutex
	data := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/workers") {
			mu.Lock()
			dataWorkers++
			mu.Unlock()
			http.Error(w, `{"error":"admin routes are on the admin listener"}`, http.StatusNotFound)
			return
		}
		proxyTo(t, srv.URL, w, r)
	}))
	defer data.Close()
	cfg := validRouteConfig()
	cfg.URL, cfg.AdminURL, cfg.Cleanup = data.URL, srv.URL, true
	target, err := PrepareRouteTarget(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if dataWorkers != 0 || f.routes != 5 || len(f.workers) != 0 {
		t.Errorf("%d /workers calls on the data listener, %d routes, %d workers left; want 0, 5 (sample + 4 busy), 0", dataWorkers, f.routes, len(f.workers))
	}
}

// TestRouteTargetSendsTokens checks the admin token goes with the set-up
// calls and the API token with the decisions.
func TestRouteTargetSendsTokens(t *testing.T) {
	_, srv := newFakeRouter(t)
	var mu sync.Mutex
	seen := map[string]map[string]int{} // path -> Authorization -> calls
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if strings.HasPrefix(path, "/workers/") {
			path = "/workers/{id}"
		}
		mu.Lock()
		if seen[path] == nil {
			seen[path] = map[string]int{}
		}
		seen[path][r.Header.Get("Authorization")]++
		mu.Unlock()
		proxyTo(t, srv.URL, w, r)
	}))
	defer auth.Close()
	cfg := validRouteConfig()
	cfg.URL, cfg.Cleanup, cfg.APIToken, cfg.AdminToken = auth.URL, true, "api-token", "admin-token"
	target, err := PrepareRouteTarget(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := target.Run(context.Background(), OpenLoopConfig{Rate: 1000, Duration: 5 * time.Millisecond, MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	if err := target.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for path, byAuth := range seen {
		for a, n := range byAuth {
			if a != "Bearer admin-token" && a != "Bearer api-token" {
				t.Errorf("%d calls to %s with Authorization %q", n, path, a)
			}
		}
	}
	if seen["/workers"]["Bearer admin-token"] == 0 || seen["/workers/{id}"]["Bearer admin-token"] == 0 {
		t.Errorf("set-up calls not made with the admin token: %v", seen)
	}
	// The load's decisions and frees carry the API token (the set-up's
	// sample decision and busy requests the admin one).
	if seen["/route"]["Bearer api-token"] != 5 || seen["/free"]["Bearer api-token"] != 5 {
		t.Errorf("load calls: %v", seen)
	}
}

// proxyTo forwards r to base and copies the answer back.
func proxyTo(t *testing.T, base string, w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.Path, r.Body)
	if err != nil {
		t.Error(err)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
