package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
)

// trustRoute is the /route answer with the chosen rank's index trust.
type trustRoute struct {
	routeReply
	IndexTrust string `json:"index_trust"`
}

// served is one request as the router predicted it and the engine
// answered it.
type served struct {
	worker               uint64
	trust                string
	predicted, confirmed int
}

func (s served) falseHit() bool { return s.predicted > s.confirmed }

// serveVia routes a prompt (recorded, as a client of /route does), sends
// it to the chosen worker itself, reads the engine's cached tokens from
// its usage, and frees the request.
func serveVia(t *testing.T, base string, urls map[uint64]string, id string, prompt []uint32) served {
	t.Helper()
	var rt trustRoute
	if code := Post(t, base+"/route", map[string]any{"token_ids": prompt, "update_states": true, "request_id": id}, &rt); code != 200 {
		t.Fatalf("route %s: %d %s", id, code, rt.Error)
	}
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1})
	req, _ := http.NewRequest(http.MethodPost, urls[rt.WorkerID]+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Dp-Rank", fmt.Sprint(rt.DpRank))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Usage struct {
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("worker %d: %d %v", rt.WorkerID, resp.StatusCode, err)
	}
	if code := Post(t, base+"/free", map[string]any{"request_id": id}, nil); code != 200 {
		t.Fatalf("free %s: %d", id, code)
	}
	return served{worker: rt.WorkerID, trust: rt.IndexTrust, predicted: int(rt.CachedTokens),
		confirmed: out.Usage.PromptTokensDetails.CachedTokens}
}

// rankTrust reads a worker's rank-0 index trust from GET /workers.
func rankTrust(t *testing.T, base string, worker uint64) (state, reason string, indexed uint64) {
	t.Helper()
	_, body := Get(t, base+"/workers")
	var w struct {
		Workers []struct {
			WorkerID uint64 `json:"worker_id"`
			Ranks    []struct {
				IndexedBlocks uint64 `json:"indexed_blocks"`
				IndexTrust    struct {
					State  string `json:"state"`
					Reason string `json:"reason"`
				} `json:"index_trust"`
			} `json:"ranks"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		t.Fatal(err)
	}
	for _, x := range w.Workers {
		if x.WorkerID == worker && len(x.Ranks) > 0 {
			return x.Ranks[0].IndexTrust.State, x.Ranks[0].IndexTrust.Reason, x.Ranks[0].IndexedBlocks
		}
	}
	t.Fatalf("worker %d not in /workers: %s", worker, body)
	return "", "", 0
}

// falseHits counts the requests whose predicted cached tokens the engine
// did not confirm, and those predicted tokens.
func falseHits(rs []served) (requests, tokens, predicted int) {
	for _, r := range rs {
		predicted += r.predicted
		if r.falseHit() {
			requests++
			tokens += r.predicted - r.confirmed
		}
	}
	return
}

// TestDeadEventStreamFallsBackToPredictions: worker 1's KV event stream
// dies (the mock engine stops publishing) while it keeps serving, and its
// cache is reset unseen, so the router's index claims prefixes the engine
// no longer holds. Routing on that index predicts hits the engine does not
// confirm; once the rank is untrusted (stale stream) it is scored from
// predicted blocks and the false hits stop. The state shows in /workers,
// the route reply, the metrics and the proxy's header; a clear restores
// the rank.
func TestDeadEventStreamFallsBackToPredictions(t *testing.T) {
	const staleAfter = 2 * time.Second
	rep := StartReplica(t, func(c *config.Config) { c.IndexTrustStaleAfter = staleAfter; c.IndexTrustGapGrace = time.Second })
	base := BaseURL(rep)
	urls := map[uint64]string{1: StartMockWorker(t, rep, 1, nil), 2: StartMockWorker(t, rep, 2, nil)}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if n := len(workers(t, base).Workers); n != 2 {
			return fmt.Errorf("%d workers", n)
		}
		return nil
	})

	// Worker 1 caches 24 prompts of 8 blocks, and the router indexes them.
	// One token more than the blocks: an engine always recomputes a
	// prompt's last token (vLLM; the mock engine too), so a prompt of
	// whole blocks can never be confirmed whole.
	const prompts, blocks = 24, 8
	prompt := func(i int) []uint32 { return tokens(16*blocks+1, uint32(100+i)) }
	for i := range prompts {
		body, _ := json.Marshal(map[string]any{"prompt": prompt(i), "max_tokens": 1})
		resp, err := http.Post(urls[1]+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if _, _, n := rankTrust(t, base, 1); n < prompts*blocks {
			return fmt.Errorf("worker 1 has %d blocks indexed, want %d", n, prompts*blocks)
		}
		return nil
	})
	if s, _, _ := rankTrust(t, base, 1); s != "exact" {
		t.Fatalf("worker 1 starts %s", s)
	}

	// The stream dies; the engine keeps serving and loses its cache.
	muted := time.Now()
	if code := Post(t, urls[1]+"/fault", map[string]any{"events_muted": true}, nil); code != 200 {
		t.Fatalf("mute: %d", code)
	}
	if code := Post(t, urls[1]+"/reset_prefix_cache", "{}", nil); code != 200 {
		t.Fatalf("reset: %d", code)
	}

	// Before the fallback: the first half of the prompts, routed on the
	// stale index.
	var before []served
	for i := range prompts / 2 {
		before = append(before, serveVia(t, base, urls, fmt.Sprintf("before-%d", i), prompt(i)))
	}
	for _, s := range before {
		if s.trust == "untrusted" {
			t.Fatalf("the rank went untrusted during the first phase (%s): raise the phase's speed or staleAfter", time.Since(muted))
		}
	}

	// Serving goes on (fresh prompts) until the rank is untrusted.
	var untrustedAfter time.Duration
	for i := 0; ; i++ {
		if s, why, _ := rankTrust(t, base, 1); s == "untrusted" {
			untrustedAfter = time.Since(muted)
			if why != "stale_stream" {
				t.Fatalf("untrusted for %q, want stale_stream", why)
			}
			break
		}
		if time.Since(muted) > staleAfter+5*time.Second {
			t.Fatal("a dead stream never made its rank untrusted")
		}
		serveVia(t, base, urls, fmt.Sprintf("fill-%d", i), tokens(64, uint32(5000+i)))
		time.Sleep(100 * time.Millisecond)
	}

	// After the fallback: the other half, which the index still claims.
	var after []served
	for i := prompts / 2; i < prompts; i++ {
		after = append(after, serveVia(t, base, urls, fmt.Sprintf("after-%d", i), prompt(i)))
	}
	// Hits the predictions do get right: a prompt served twice.
	var repeats []served
	var onUntrusted []uint32 // a prompt the untrusted rank served twice
	for i := range 6 {
		p := tokens(16*blocks+1, uint32(7000+i))
		serveVia(t, base, urls, fmt.Sprintf("first-%d", i), p)
		again := serveVia(t, base, urls, fmt.Sprintf("again-%d", i), p)
		repeats = append(repeats, again)
		if again.worker == 1 {
			onUntrusted = p
		}
	}

	fb, ft, fp := falseHits(before)
	ab, at, ap := falseHits(after)
	rb, _, rp := falseHits(repeats)
	toUntrusted := 0
	for _, r := range append(after, repeats...) {
		if r.worker == 1 && r.trust != "untrusted" {
			t.Errorf("route reply for worker 1 says %q after the fallback", r.trust)
		}
		if r.worker == 1 {
			toUntrusted++
		}
	}
	t.Logf("stream muted -> untrusted in %.2fs (index-trust-stale-after %s)", untrustedAfter.Seconds(), staleAfter)
	t.Logf("before fallback: %d/%d requests with false hits, %d of %d predicted cached tokens unconfirmed (%.0f%%)",
		fb, len(before), ft, fp, 100*ratio(ft, fp))
	t.Logf("after fallback:  %d/%d requests with false hits, %d of %d predicted cached tokens unconfirmed (%.0f%%)",
		ab, len(after), at, ap, 100*ratio(at, ap))
	t.Logf("after fallback, repeated prompts: %d/%d false hits, %d predicted cached tokens; %d routes to the untrusted rank",
		rb, len(repeats), rp, toUntrusted)
	if fb < len(before)/2 {
		t.Fatalf("only %d of %d requests were false hits before the fallback: the test did not reproduce a stale index", fb, len(before))
	}
	if ab != 0 || ratio(at, ap) >= ratio(ft, fp) {
		t.Fatalf("false hits did not drop: %d requests (%d tokens) after vs %d (%d) before", ab, at, fb, ft)
	}
	if rb != 0 || rp == 0 {
		t.Fatalf("repeated prompts: %d false hits, %d predicted tokens; want real hits, none false", rb, rp)
	}

	// Metrics and the proxy's header.
	_, page := Get(t, base+"/metrics")
	for _, want := range []string{`kvrouter_index_trust{dp_rank="0",worker_id="1"} 2`, `kvrouter_index_trust{dp_rank="0",worker_id="2"} 0`,
		`kvrouter_index_trust_to_untrusted_total{source="stale_stream"} 1`} {
		if !strings.Contains(page, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Through the proxy, a prompt predicted on the untrusted rank goes
	// there, and the answer says whose index it was scored from.
	if onUntrusted == nil {
		t.Fatal("no repeated prompt was served by the untrusted rank")
	}
	body, _ := json.Marshal(map[string]any{"prompt": onUntrusted, "max_tokens": 1})
	resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := resp.Header.Get("X-Kvrouter-Index-Trust"); resp.StatusCode != 200 || h != "untrusted" {
		t.Fatalf("proxied answer: %d, index trust header %q, want untrusted", resp.StatusCode, h)
	}

	// The stream comes back: its event ids show what the mute lost (a
	// gap NATS cannot replay), so the rank stays untrusted.
	Post(t, urls[1]+"/fault", map[string]any{"events_muted": false}, nil)
	body, _ = json.Marshal(map[string]any{"prompt": tokens(64, 8888), "max_tokens": 1})
	if resp, err = http.Post(urls[1]+"/v1/completions", "application/json", bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if s, why, _ := rankTrust(t, base, 1); s != "untrusted" || why != "gap_unrepaired" {
			return fmt.Errorf("after the stream resumed worker 1 is %s (%s), want untrusted (gap_unrepaired)", s, why)
		}
		return nil
	})
	// The engine clears its cache: exact again.
	Post(t, urls[1]+"/reset_prefix_cache", "{}", nil)
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if s, why, _ := rankTrust(t, base, 1); s != "exact" {
			return fmt.Errorf("after the clear worker 1 is %s (%s)", s, why)
		}
		return nil
	})
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// TestParityDriftUntrustsARank: the engine behind worker 1 loses its cache
// without an event reaching the router (its stream is muted while it
// resets), but the stream is not stale long enough to be noticed. The
// proxy's live cache parity sees the engine confirm none of the hits the
// index predicts, and index trust marks the rank untrusted for
// parity_drift: the proxy's usage reaches the trust actor.
func TestParityDriftUntrustsARank(t *testing.T) {
	const window = 8
	rep := StartReplica(t, func(c *config.Config) {
		c.IndexTrustStaleAfter = 10 * time.Minute
		c.IndexTrustParityWindow = window
	})
	base := BaseURL(rep)
	url := StartMockWorker(t, rep, 1, nil)
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if n := len(workers(t, base).Workers); n != 1 {
			return fmt.Errorf("%d workers", n)
		}
		return nil
	})
	const blocks = 8
	prompt := func(i int) []uint32 { return tokens(16*blocks+1, uint32(300+i)) }
	complete := func(target string, p []uint32) *http.Response {
		body, _ := json.Marshal(map[string]any{"prompt": p, "max_tokens": 1})
		resp, err := http.Post(target+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", target, resp.StatusCode)
		}
		return resp
	}
	for i := range window {
		complete(url, prompt(i))
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if _, _, n := rankTrust(t, base, 1); n < window*blocks {
			return fmt.Errorf("worker 1 has %d blocks indexed, want %d", n, window*blocks)
		}
		return nil
	})
	Post(t, url+"/fault", map[string]any{"events_muted": true}, nil)
	Post(t, url+"/reset_prefix_cache", "{}", nil)

	// Through the proxy: every prompt is predicted cached, none is.
	for i := range window {
		if h := complete(base, prompt(i)).Header.Get("X-Kvrouter-Index-Trust"); i == 0 && h != "exact" {
			t.Fatalf("first proxied answer's index trust %q, want exact", h)
		}
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if s, why, _ := rankTrust(t, base, 1); s != "untrusted" || why != "parity_drift" {
			return fmt.Errorf("worker 1 is %s (%s), want untrusted (parity_drift)", s, why)
		}
		return nil
	})
}
