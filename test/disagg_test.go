package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
)

type engineStats struct {
	Running, Waiting              int
	PromptTokens, PrefixHits      uint64
	FinishedRequests, UsedBlocks  uint64
	GenerationTokens, Preemptions uint64
}

func mockStats(t testing.TB, url string) engineStats {
	t.Helper()
	code, body := Get(t, url+"/stats")
	if code != http.StatusOK {
		t.Fatalf("GET %s/stats: %d", url, code)
	}
	var st []engineStats
	if err := json.Unmarshal([]byte(body), &st); err != nil || len(st) != 1 {
		t.Fatalf("stats %s: %v", body, err)
	}
	return st[0]
}

type pdRoute struct {
	WorkerID         uint64  `json:"worker_id"`
	PrefillWorkerID  *uint64 `json:"prefill_worker_id"`
	PrefillRequestID string  `json:"prefill_request_id"`
}

// A fleet of real mock engines in two pools (roles from their
// heartbeats) behind a replica: a long prompt is prefilled on a prefill
// engine, whose blocks the decode engine pulls (and announces as
// cached); the same prompt then stays on that decode engine (conditional
// disaggregation); nothing stays tracked after completion or a client
// that leaves mid-decode.
func TestDisaggregatedFleet(t *testing.T) {
	rep := StartReplica(t, func(c *config.Config) { c.MaxLocalPrefillLength = 64 })
	base := BaseURL(rep)
	role := func(r kv.Role) func(*mockengine.ServerConfig) {
		return func(c *mockengine.ServerConfig) { c.Role = r }
	}
	urls := map[uint64]string{
		1: StartMockWorker(t, rep, 1, role(kv.RolePrefill)),
		2: StartMockWorker(t, rep, 2, role(kv.RolePrefill)),
		3: StartMockWorker(t, rep, 3, role(kv.RoleDecode)),
		4: StartMockWorker(t, rep, 4, role(kv.RoleDecode)),
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		var w struct {
			Workers []struct {
				WorkerID uint64 `json:"worker_id"`
				Role     string `json:"role"`
			} `json:"workers"`
		}
		_, body := Get(t, base+"/workers")
		if err := json.Unmarshal([]byte(body), &w); err != nil {
			return err
		}
		roles := map[uint64]string{}
		for _, x := range w.Workers {
			roles[x.WorkerID] = x.Role
		}
		if roles[1] != "prefill" || roles[2] != "prefill" || roles[3] != "decode" || roles[4] != "decode" {
			return fmt.Errorf("roles %v", roles)
		}
		return nil
	})
	prompt := tokens(512, 21) // 32 blocks

	// /route answers both ranks for a disaggregated request.
	var q pdRoute
	if code := Post(t, base+"/route", map[string]any{"token_ids": prompt, "update_states": false}, &q); code != 200 ||
		q.PrefillWorkerID == nil || (*q.PrefillWorkerID != 1 && *q.PrefillWorkerID != 2) || (q.WorkerID != 3 && q.WorkerID != 4) {
		t.Fatalf("/route: %d %+v", code, q)
	}

	// Through the proxy: prefill on a prefill engine, decode elsewhere.
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 20, "stream": true})
	resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	chunks := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			chunks++
		}
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || chunks != 20 {
		t.Fatalf("completion: %d, %d chunks", resp.StatusCode, chunks)
	}
	prefilled, decoder := uint64(0), uint64(0)
	for id, u := range urls {
		st := mockStats(t, u)
		switch {
		case id <= 2 && st.FinishedRequests == 1 && st.GenerationTokens == 1:
			prefilled = id
		case id >= 3 && st.FinishedRequests == 1 && st.GenerationTokens == 20:
			decoder = id
			// The decode engine received 31 of the 32 blocks (the last
			// one, as in vLLM, is recomputed) instead of computing them.
			if st.PrefixHits != 496 {
				t.Fatalf("decode engine %d found %d prompt tokens cached, want 496 transferred", id, st.PrefixHits)
			}
		}
	}
	if prefilled == 0 || decoder == 0 {
		t.Fatalf("prefill on %d, decode on %d", prefilled, decoder)
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := activeRequests(t, base); n != 0 {
			return fmt.Errorf("%d requests still active", n)
		}
		return nil
	})

	// The decode engine announced the received blocks: the same prompt
	// is now short for it (uncached ≤ 64 tokens), so it prefills locally.
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		var again pdRoute
		Post(t, base+"/route", map[string]any{"token_ids": prompt, "update_states": false}, &again)
		if again.PrefillWorkerID != nil || again.WorkerID != decoder {
			return fmt.Errorf("repeat prompt: %+v, want local on %d", again, decoder)
		}
		return nil
	})
	var out map[string]any
	if code := Post(t, base+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 4}, &out); code != 200 {
		t.Fatalf("local completion: %d %v", code, out)
	}
	if st := mockStats(t, urls[prefilled]); st.FinishedRequests != 1 {
		t.Fatalf("the prefill engine served %d requests, want still 1 (local path)", st.FinishedRequests)
	}
	if st := mockStats(t, urls[decoder]); st.FinishedRequests != 2 {
		t.Fatalf("the decode engine served %d requests, want 2", st.FinishedRequests)
	}

	// A client that leaves mid-decode of a disaggregated request.
	ctx, cancel := context.WithCancel(context.Background())
	body, _ = json.Marshal(map[string]any{"prompt": tokens(512, 22), "max_tokens": 2000, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 4; i++ {
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if n := activeRequests(t, base); n != 1 {
		t.Fatalf("%d active requests mid-decode, want 1 (the prefill hop is freed)", n)
	}
	cancel()
	resp.Body.Close()
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := activeRequests(t, base); n != 0 {
			return fmt.Errorf("%d requests still active after the client left", n)
		}
		return nil
	})
}
