package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
)

type sessionReply struct {
	SessionID string    `json:"session_id"`
	WorkerID  uint64    `json:"worker_id"`
	DpRank    uint32    `json:"dp_rank"`
	LastUsed  time.Time `json:"last_used"`
	Error     string    `json:"error"`
}

// getSession reads a replica's binding of a session (code 404: none).
func getSession(t testing.TB, base, id string) (int, sessionReply) {
	t.Helper()
	code, body := Get(t, base+"/sessions/"+id)
	var s sessionReply
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("GET /sessions/%s: %d %q: %v", id, code, body, err)
	}
	return code, s
}

func deleteSession(t testing.TB, base, id string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, base+"/sessions/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("DELETE /sessions/%s: %d, body not JSON: %v", id, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// metricValue sums a metric's samples whose line starts with prefix.
func metricValue(t testing.TB, base, prefix string) float64 {
	t.Helper()
	_, m := Get(t, base+"/metrics")
	var sum float64
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, prefix) {
			var v float64
			fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v)
			sum += v
		}
	}
	return sum
}

// TestStickySessionSurvivesKill9 runs 3 replica processes and 4 engines:
// sessions created through replica A are gossiped; A is kill -9ed; every
// session's next request through replica B (and through HAProxy, before
// and after the kill) lands on the worker A bound it to; a replica that joins afterwards learns the sessions by anti-entropy;
// DELETE through B ends a session on every replica; bad session ids get
// 4xx JSON; a flood of fresh ids leaves the table at --max-sessions.
func TestStickySessionSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 replica processes and 4 engines")
	}
	const maxSessions = 40
	c := startProcessCluster(t, 3, "--heartbeat-timeout", "1m", "--log-level", "warn", "--proxy",
		"--max-sessions", fmt.Sprint(maxSessions))
	for id := uint64(1); id <= 4; id++ {
		StartMockWorkerOn(t, c.NATSURL, id, nil)
	}
	for _, r := range c.Replicas {
		base := r.BaseURL
		testutil.EventuallyNil(t, 10*time.Second, func() error {
			if n := len(workers(t, base).Workers); n != 4 {
				return fmt.Errorf("%s: %d workers", base, n)
			}
			return nil
		})
	}
	a, b, seed := c.Replicas[1].BaseURL, c.Replicas[2].BaseURL, c.Replicas[0].BaseURL

	// Eight sessions, created through A.
	const sessions = 8
	bound := map[string]uint64{}
	for i := range sessions {
		id := fmt.Sprintf("conv-%d", i)
		var rr routeReply
		body := map[string]any{"request_id": id + "-q0", "token_ids": tokens(256, uint32(i+1)), "session_id": id}
		if code := Post(t, a+"/route", body, &rr); code != 200 {
			t.Fatalf("route %s through A: %d %s", id, code, rr.Error)
		}
		bound[id] = rr.WorkerID
	}
	// Gossiped to the others.
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		for id, w := range bound {
			for _, base := range []string{b, seed} {
				if code, s := getSession(t, base, id); code != 200 || s.WorkerID != w {
					return fmt.Errorf("%s: session %s: %d %+v, want worker %d", base, id, code, s, w)
				}
			}
		}
		return nil
	})

	// Behind HAProxy (round robin over the three), every replica routes a
	// session's next request to its worker.
	lb := startHAProxy(t, []string{strings.TrimPrefix(seed, "http://"), strings.TrimPrefix(a, "http://"), strings.TrimPrefix(b, "http://")})
	viaLB := func(round int) {
		t.Helper()
		for i := range sessions {
			id := fmt.Sprintf("conv-%d", i)
			var rr routeReply
			body := map[string]any{"token_ids": tokens(128, uint32(round*100+i)), "session_id": id}
			if code := Post(t, lb+"/route", body, &rr); code != 200 {
				t.Fatalf("round %d: route %s through the LB: %d %s", round, id, code, rr.Error)
			}
			if rr.WorkerID != bound[id] {
				t.Fatalf("round %d: session %s routed to worker %d through the LB, bound to %d", round, id, rr.WorkerID, bound[id])
			}
		}
	}
	viaLB(5)

	if err := c.Replicas[1].Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Through B: another prompt, same session → the worker A chose. Every
	// earlier request is still in flight, so the load alone would spread
	// these.
	landed := 0
	for i := range sessions {
		id := fmt.Sprintf("conv-%d", i)
		var rr routeReply
		body := map[string]any{"request_id": id + "-q1", "token_ids": tokens(256, uint32(100+i)), "session_id": id}
		if code := Post(t, b+"/route", body, &rr); code != 200 {
			t.Fatalf("route %s through B: %d %s", id, code, rr.Error)
		}
		if rr.WorkerID != bound[id] {
			t.Fatalf("session %s: routed to worker %d through B after kill -9 of A, bound to %d", id, rr.WorkerID, bound[id])
		}
		landed++
	}
	routedAfter := time.Since(killed)
	viaLB(6) // A is dead: HAProxy retries its share on the others
	// Through B's proxy, by header: the session stays (no move) and its
	// use is recorded.
	before := time.Now()
	req, _ := http.NewRequest(http.MethodPost, b+"/v1/completions",
		strings.NewReader(fmt.Sprintf(`{"prompt":%s,"max_tokens":4}`, mustJSON(t, tokens(128, 300)))))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", "conv-0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("proxied completion: %d", resp.StatusCode)
	}
	if code, s := getSession(t, b, "conv-0"); code != 200 || s.WorkerID != bound["conv-0"] || s.LastUsed.Before(before.Add(-time.Second)) {
		t.Fatalf("after a proxied request: %d %+v (bound %d, sent at %v)", code, s, bound["conv-0"], before)
	}
	if moves := metricValue(t, b, "kvrouter_session_moves_total"); moves != 0 {
		t.Fatalf("B moved %v sessions", moves)
	}

	// A replica joining now missed every gossiped bind: anti-entropy
	// brings the table (it is ready only once it holds its peers').
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := c.AddReplica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		for id, w := range bound {
			if code, s := getSession(t, d.BaseURL, id); code != 200 || s.WorkerID != w {
				return fmt.Errorf("joined replica: session %s: %d %+v, want worker %d", id, code, s, w)
			}
		}
		return nil
	})
	var rr routeReply
	if code := Post(t, d.BaseURL+"/route", map[string]any{"token_ids": tokens(64, 400), "session_id": "conv-5"}, &rr); code != 200 || rr.WorkerID != bound["conv-5"] {
		t.Fatalf("route through the joined replica: %d %+v, want worker %d", code, rr, bound["conv-5"])
	}

	// DELETE through B ends it everywhere.
	if code, out := deleteSession(t, b, "conv-1"); code != 200 || out["ended"] != true {
		t.Fatalf("DELETE through B: %d %v", code, out)
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		for _, base := range []string{b, seed, d.BaseURL} {
			if code, _ := getSession(t, base, "conv-1"); code != 404 {
				return fmt.Errorf("%s still has conv-1 (%d)", base, code)
			}
		}
		return nil
	})
	if code, out := deleteSession(t, seed, "conv-1"); code != 404 || out["error"] == nil {
		t.Fatalf("DELETE of an ended session through another replica: %d %v", code, out)
	}

	// Bad input: 4xx with a JSON error, nothing stored.
	for _, bad := range []string{
		`{"token_ids":[1,2,3],"session_id":"` + strings.Repeat("x", 100_000) + `"}`,
		`{"token_ids":[1,2,3],"session_id":42}`,
		`{"token_ids":[1,2,3],"session_id":"tab\there"}`,
		`{"token_ids":[1,2,3],"session_id":`,
	} {
		var er routeReply
		code := Post(t, b+"/route", bad, &er)
		if code < 400 || code >= 500 || er.Error == "" {
			t.Fatalf("bad session input %.60q: %d %+v", bad, code, er)
		}
	}
	if code, out := deleteSession(t, b, strings.Repeat("y", 1000)); code != 400 || out["error"] == nil {
		t.Fatalf("DELETE of a huge id: %d %v", code, out)
	}

	// A flood of fresh session ids through B: the table stays bounded and
	// the evictions are counted, on B and on the peers that apply its
	// gossip.
	for i := range 3 * maxSessions {
		var fr routeReply
		body := map[string]any{"token_ids": tokens(32, uint32(1000+i)), "session_id": fmt.Sprintf("flood-%d", i), "update_states": true}
		if code := Post(t, b+"/route", body, &fr); code != 200 {
			t.Fatalf("flood %d: %d %s", i, code, fr.Error)
		}
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		for _, base := range []string{b, seed, d.BaseURL} {
			n := metricValue(t, base, "kvrouter_sessions ")
			ev := metricValue(t, base, `kvrouter_session_events_total{event="evicted"}`)
			if n > maxSessions || n < maxSessions/2 || ev == 0 {
				return fmt.Errorf("%s: %v sessions, %v evicted (cap %d)", base, n, ev, maxSessions)
			}
		}
		return nil
	})
	t.Logf("kill -9 of replica A: %d/%d sessions' next request through replica B landed on the worker A bound (all %d routed within %v of the kill), and through HAProxy before and after; a replica joining later held all %d by anti-entropy; DELETE through B ended one on all 3 live replicas; a flood of %d ids left every table at <= %d",
		landed, sessions, sessions, routedAfter.Round(time.Millisecond), sessions, 3*maxSessions, maxSessions)
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
