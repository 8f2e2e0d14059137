package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/replica"
)

const (
	leakerToken = "leaker-token-0123456789"
	goodToken   = "good-client-token-98765"
)

// routeAs posts /route with a bearer token and returns the status and body.
func routeAs(t *testing.T, base, token, id string) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"request_id": id, "token_ids": tokens(64, 7), "expected_output_tokens": 10})
	req, err := http.NewRequest(http.MethodPost, base+"/route", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("/route answer %q: %v", raw, err)
	}
	return resp.StatusCode, out
}

// leaseCluster starts two replicas (shared NATS, joined over memberlist)
// that check client tokens, bound each client to max active requests and
// lease requests for lease (a 10-token output is far below it).
func leaseCluster(t *testing.T, max int, lease time.Duration) (a, b *replica.Replica) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte(leakerToken+"\n"+goodToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(i int, peer *replica.Replica) *replica.Replica {
		return StartReplica(t, func(c *config.Config) {
			c.ReplicaID = fmt.Sprintf("lease%d-%d", i, time.Now().UnixNano()%100000)
			c.ClusterBind, c.ClusterFast = "127.0.0.1:0", true
			c.HeartbeatTimeout = time.Minute
			c.APITokenFile = tokenFile
			c.MaxActiveRequestsPerClient = max
			c.RequestLeaseMin = lease
			c.RequestLeaseDecodeToken = time.Millisecond
			if peer != nil {
				c.NATSURL = peer.NATSURL()
				c.ClusterJoin = []string{peer.ClusterAddr()}
			}
		})
	}
	a = start(0, nil)
	b = start(1, a)
	waitMembers(t, []*replica.Replica{a, b}, 2)
	publish(t, connect(t, a), "kvrouter.workers", heartbeat(1))
	for _, r := range []*replica.Replica{a, b} {
		testutil.EventuallyNil(t, 10*time.Second, func() error {
			if len(workersAs(t, BaseURL(r)).Workers) != 1 {
				return fmt.Errorf("%s: worker not registered", r.ID())
			}
			return r.Ready()
		})
	}
	return a, b
}

func workersAs(t *testing.T, base string) workersReply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/workers", nil)
	req.Header.Set("Authorization", "Bearer "+goodToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var w workersReply
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		t.Fatal(err)
	}
	return w
}

func activeAs(t *testing.T, base string) uint32 {
	var n uint32
	for _, w := range workersAs(t, base).Workers {
		for _, r := range w.Ranks {
			n += r.ActiveRequests
		}
	}
	return n
}

// A client that routes and never frees fills its own bound, not the
// replica: its next route gets 429 naming the reason while another
// client is served, /readyz stays 200 and says one client is saturated;
// the leaked requests end with their lease on both replicas, and the
// client can route again.
func TestLeakingClientIsBoundedAndItsLeaseExpires(t *testing.T) {
	const bound = 3
	a, b := leaseCluster(t, bound, 500*time.Millisecond)
	baseA, baseB := BaseURL(a), BaseURL(b)

	for i := range bound {
		if code, out := routeAs(t, baseA, leakerToken, fmt.Sprintf("leak-%d", i)); code != http.StatusOK {
			t.Fatalf("leaker's route %d: %d %v", i, code, out)
		}
	}
	code, out := routeAs(t, baseA, leakerToken, "leak-over")
	if code != http.StatusTooManyRequests || out["reason"] != "client_active_requests" ||
		!strings.Contains(fmt.Sprint(out["error"]), "max-active-requests-per-client") {
		t.Fatalf("leaker past its bound: %d %v; want 429 with reason client_active_requests", code, out)
	}
	if code, out := routeAs(t, baseA, goodToken, "good-1"); code != http.StatusOK {
		t.Fatalf("another client while the leaker is at its bound: %d %v", code, out)
	}
	if code := postAs(t, baseA+"/free", goodToken, `{"request_id":"good-1"}`); code != http.StatusOK {
		t.Fatalf("free: %d", code)
	}

	code, ready := readyz(t, baseA)
	if code != http.StatusOK {
		t.Fatalf("/readyz with one client saturated = %d %+v; one client's bound must not take the replica out", code, ready)
	}
	if ok, why, found := ready.condition("clients"); !found || ok || !strings.Contains(why, "one client holds 3 of the 3") {
		t.Errorf("clients condition ok=%v found=%v %q, want it to say one client holds its bound", ok, found, why)
	}
	for sample, want := range map[string]float64{
		`kvrouter_admission_refused_total{reason="client_active_requests"} `: 1,
		"kvrouter_client_saturated ":                                         1,
		"kvrouter_client_top_active_requests ":                               bound,
		"kvrouter_client_top_share ":                                         1,
	} {
		if got := metricValue(t, baseA, sample); got != want {
			t.Errorf("%s= %v, want %v", sample, got, want)
		}
	}

	// The peer counts the leaked load, then both drop it on the lease.
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := activeAs(t, baseB); n != bound {
			return fmt.Errorf("peer sees %d active, want %d", n, bound)
		}
		return nil
	})
	leaked := time.Now()
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if na, nb := activeAs(t, baseA), activeAs(t, baseB); na != 0 || nb != 0 {
			return fmt.Errorf("active after the lease: %d here, %d on the peer", na, nb)
		}
		return nil
	})
	t.Logf("leaked load gone from both replicas %v after the check (lease 500ms, sweep on the 1 s tick)", time.Since(leaked).Round(10*time.Millisecond))
	if n := metricValue(t, baseA, `kvrouter_requests_expired_total{reason="lease"} `); n != bound {
		t.Errorf(`kvrouter_requests_expired_total{reason="lease"} = %v, want %d`, n, bound)
	}
	if code, out := routeAs(t, baseA, leakerToken, "leak-again"); code != http.StatusOK {
		t.Fatalf("leaker after its leases ended: %d %v", code, out)
	}
	if _, ready := readyz(t, baseA); func() bool { ok, _, _ := ready.condition("clients"); return !ok }() {
		t.Errorf("clients condition still failed after the leases ended: %+v", ready)
	}
}

// A renewed request outlives its lease; once renewals stop it expires.
func TestRenewedRequestOutlivesItsLease(t *testing.T) {
	a, _ := leaseCluster(t, 0, 500*time.Millisecond)
	base := BaseURL(a)
	if code, out := routeAs(t, base, goodToken, "streaming"); code != http.StatusOK {
		t.Fatalf("route: %d %v", code, out)
	}
	until := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(until) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := a.Router().RenewLease(ctx, "streaming") // what the proxy does while an answer streams
		cancel()
		if err != nil {
			t.Fatalf("renewal after %v: %v (the lease ran out while renewed)", 2500*time.Millisecond-time.Until(until), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := activeAs(t, base); n != 1 {
		t.Fatalf("renewed request: %d active, want 1", n)
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := activeAs(t, base); n != 0 {
			return fmt.Errorf("%d active after renewals stopped", n)
		}
		return nil
	})
}

func postAs(t *testing.T, url, token, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The proxy renews the lease of an answer it streams: a stream that
// lasts several leases keeps its request active to the end and none
// expires.
func TestProxyRenewsStreamingLease(t *testing.T) {
	rep := StartReplica(t, func(c *config.Config) {
		c.RequestLeaseMin = 400 * time.Millisecond
		c.RequestLeaseDecodeToken = time.Millisecond // 50 tokens: the minimum
	})
	base := BaseURL(rep)
	StartMockWorker(t, rep, 1, func(c *mockengine.ServerConfig) {
		c.Engine.StepBaseTime = 500 * time.Millisecond // 50 ms a token at the harness's 10× speedup
	})
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if n := len(workers(t, base).Workers); n != 1 {
			return fmt.Errorf("%d workers", n)
		}
		return nil
	})
	body, _ := json.Marshal(map[string]any{"prompt": tokens(64, 9), "max_tokens": 50, "stream": true})
	start := time.Now()
	resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	chunks, midStream := 0, -1
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			chunks++
		}
		if midStream < 0 && time.Since(start) > 1500*time.Millisecond {
			midStream = int(activeRequests(t, base))
		}
	}
	took := time.Since(start)
	if chunks != 50 || took < 2*time.Second {
		t.Fatalf("%d chunks in %v; the test needs 50 over at least 2 s (several leases and ticks)", chunks, took)
	}
	if midStream != 1 {
		t.Errorf("%d requests active 1.5 s into the stream, want 1 (its lease renewed)", midStream)
	}
	if n := metricValue(t, base, `kvrouter_requests_expired_total{reason="lease"} `); n != 0 {
		t.Errorf("%v leases expired while their answers streamed", n)
	}
}
