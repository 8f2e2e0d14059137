package test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
)

// sendClient bounds every call: without the controls under test a request
// may loop or hang, and the test must fail, not wait.
var sendClient = &http.Client{Timeout: 20 * time.Second}

// send makes one request with an optional bearer token and returns the
// status, the body and the WWW-Authenticate header.
func send(t testing.TB, method, url, token, body string, hdr ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := sendClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, string(raw), resp.Header.Get("WWW-Authenticate")
}

func tokenFile(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func workerIDs(t testing.TB, base, token string) []uint64 {
	t.Helper()
	code, body, _ := send(t, "GET", base+"/workers", token, "")
	if code != http.StatusOK {
		t.Fatalf("GET /workers: %d %s", code, body)
	}
	var w workersReply
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, wk := range w.Workers {
		ids = append(ids, wk.WorkerID)
	}
	return ids
}

const staticWorker = `{"worker_id":%d,"url":"http://127.0.0.1:9"}`

// With --admin-token-file a wrong or missing token cannot change the
// registry (401 with a Bearer challenge); with --api-token-file the data
// plane wants a client token.
func TestAdminAndClientTokens(t *testing.T) {
	const admin, client = "admin-0123456789abcdef0123", "client-0123456789abcdef0123"
	rep := StartReplica(t, func(c *config.Config) {
		c.AdminTokenFile = tokenFile(t, admin)
		c.APITokenFile = tokenFile(t, client)
	})
	base := BaseURL(rep)
	for _, tok := range []string{"", "guess-0123456789abcdef0123", client} {
		code, body, challenge := send(t, "POST", base+"/workers", tok, fmt.Sprintf(staticWorker, 1))
		if code != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer ") || !strings.Contains(body, `"error"`) {
			t.Fatalf("POST /workers with %q: %d %s %q", tok, code, body, challenge)
		}
	}
	if ids := workerIDs(t, base, client); len(ids) != 0 {
		t.Fatalf("registry changed without the admin token: %v", ids)
	}
	if code, body, _ := send(t, "POST", base+"/workers", admin, fmt.Sprintf(staticWorker, 1)); code != http.StatusOK {
		t.Fatalf("POST /workers with the admin token: %d %s", code, body)
	}
	if code, _, _ := send(t, "DELETE", base+"/workers/1", client, ""); code != http.StatusUnauthorized {
		t.Fatalf("DELETE with the client token: %d", code)
	}
	if ids := workerIDs(t, base, client); len(ids) != 1 {
		t.Fatalf("workers: %v", ids)
	}
	route := `{"token_ids":[1,2,3],"update_states":false}`
	if code, _, challenge := send(t, "POST", base+"/route", "", route); code != http.StatusUnauthorized || challenge == "" {
		t.Fatalf("route without a client token: %d", code)
	}
	if code, body, _ := send(t, "POST", base+"/route", client, route); code != http.StatusOK {
		t.Fatalf("route with the client token: %d %s", code, body)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		if code, _, _ := send(t, "GET", base+path, "", ""); code != http.StatusOK {
			t.Fatalf("GET %s must stay open: %d", path, code)
		}
	}
}

// With --admin-addr the admin routes are served there only: the data
// port answers 404 and the registry does not change through it.
func TestAdminRoutesOnAdminAddrOnly(t *testing.T) {
	rep := StartReplica(t, func(c *config.Config) { c.AdminAddr = "127.0.0.1:0"; c.Pprof = true })
	base, admin := BaseURL(rep), "http://"+rep.AdminAddr()
	if rep.AdminAddr() == "" {
		t.Fatal("no admin listener")
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/workers", fmt.Sprintf(staticWorker, 1)}, {"DELETE", "/workers/1", ""}, {"GET", "/debug/pprof/", ""},
	} {
		if code, body, _ := send(t, c.method, base+c.path, "", c.body); code != http.StatusNotFound {
			t.Fatalf("%s %s on the data port: %d %s", c.method, c.path, code, body)
		}
	}
	if ids := workerIDs(t, base, ""); len(ids) != 0 {
		t.Fatalf("registry changed through the data port: %v", ids)
	}
	if code, body, _ := send(t, "POST", admin+"/workers", "", fmt.Sprintf(staticWorker, 2)); code != http.StatusOK {
		t.Fatalf("POST /workers on the admin port: %d %s", code, body)
	}
	if code, _, _ := send(t, "GET", admin+"/debug/pprof/", "", ""); code != http.StatusOK {
		t.Fatalf("pprof on the admin port: %d", code)
	}
	if ids := workerIDs(t, base, ""); len(ids) != 1 || ids[0] != 2 {
		t.Fatalf("workers: %v", ids)
	}
	if code, _, _ := send(t, "POST", admin+"/route", "", `{"token_ids":[1]}`); code != http.StatusNotFound {
		t.Fatalf("the data plane on the admin port: %d", code)
	}
	// A worker URL naming the admin listener is this router too.
	if code, body, _ := send(t, "POST", admin+"/workers", "", `{"worker_id":3,"url":"`+admin+`"}`); code != http.StatusBadRequest {
		t.Fatalf("worker URL = admin listener: %d %s", code, body)
	}
}

// Worker URLs naming the router itself, a disallowed host or another
// scheme are refused over HTTP (400) and in heartbeats (not registered,
// counted as worker_rejected{reason}); so are heartbeats announcing ZMQ
// endpoints the router must not connect to.
func TestWorkerAddressPolicy(t *testing.T) {
	rep := StartReplica(t, nil)
	base := BaseURL(rep)
	_, port, _ := net.SplitHostPort(rep.HTTPAddr())
	for _, u := range []string{base, "http://localhost:" + port, "http://0.0.0.0:" + port, "file:///etc/passwd",
		"http://admin:pw@127.0.0.1:9", "http://8.8.8.8:80", "http://169.254.169.254/latest/meta-data/"} {
		code, body, _ := send(t, "POST", base+"/workers", "", fmt.Sprintf(`{"worker_id":1,"url":%q}`, u))
		if code != http.StatusBadRequest {
			t.Fatalf("POST /workers url=%s: %d %s", u, code, body)
		}
	}
	nc := connect(t, rep)
	hb := func(id uint64, url, kvEndpoint string) string {
		return fmt.Sprintf(`{"worker_id":%d,"url":%q,"data_parallel_size":2,"block_size":16,"kv_events_endpoint":%q}`, id, url, kvEndpoint)
	}
	publish(t, nc, "kvrouter.workers", hb(11, base, ""))
	publish(t, nc, "kvrouter.workers", hb(12, "http://8.8.8.8:8000", ""))
	publish(t, nc, "kvrouter.workers", hb(13, "file:///etc/passwd", ""))
	publish(t, nc, "kvrouter.workers", hb(14, "http://127.0.0.1:9", "tcp://169.254.169.254:5557"))
	prev, _ := strconv.Atoi(port)
	publish(t, nc, "kvrouter.workers", hb(15, "http://127.0.0.1:9", fmt.Sprintf("tcp://127.0.0.1:%d", prev-1))) // rank 1 = the router's port
	publish(t, nc, "kvrouter.workers", hb(16, "http://127.0.0.1:9", "ipc:///tmp/engine"))
	publish(t, nc, "kvrouter.workers", hb(20, "http://127.0.0.1:9", ""))
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if ids := workerIDs(t, base, ""); len(ids) != 1 || ids[0] != 20 {
			return fmt.Errorf("workers %v, want only 20", ids)
		}
		return nil
	})
	_, exposition := Get(t, base+"/metrics")
	for reason, want := range map[string]float64{
		"url_self": 2 + 1, "url_not_allowed": 3 + 1, "url_invalid": 2 + 1,
		"zmq_endpoint_not_allowed": 1, "zmq_endpoint_self": 1, "zmq_endpoint_invalid": 1,
	} {
		if got := metricSum(exposition, `kvrouter_workers_rejected_total{reason="`+reason+`"}`); got < want {
			t.Errorf("worker_rejected{reason=%q} = %v, want >= %v", reason, got, want)
		}
	}
}

// Two routers whose worker URLs point at each other: a completion is
// forwarded once, refused by the second router (508, it carries the
// first's hop mark), and never loops.
func TestProxyLoopCutAtOneHop(t *testing.T) {
	a := StartReplica(t, func(c *config.Config) { c.ReplicaID = "router-a" })
	b := StartReplica(t, func(c *config.Config) { c.ReplicaID = "router-b" })
	if code, body, _ := send(t, "POST", BaseURL(a)+"/workers", "", fmt.Sprintf(`{"worker_id":1,"url":%q}`, BaseURL(b))); code != http.StatusOK {
		t.Fatalf("a: worker -> b: %d %s", code, body)
	}
	if code, body, _ := send(t, "POST", BaseURL(b)+"/workers", "", fmt.Sprintf(`{"worker_id":2,"url":%q}`, BaseURL(a))); code != http.StatusOK {
		t.Fatalf("b: worker -> a: %d %s", code, body)
	}
	for _, rep := range []string{BaseURL(a), BaseURL(b)} {
		testutil.EventuallyNil(t, 5*time.Second, func() error {
			if n := len(workerIDs(t, rep, "")); n != 1 {
				return fmt.Errorf("%d workers", n)
			}
			return nil
		})
	}
	code, body, _ := send(t, "POST", BaseURL(a)+"/v1/completions", "", `{"prompt":[1,2,3],"max_tokens":4}`)
	// The 508 names no replica (the client must not learn the fleet's ids).
	if code != http.StatusLoopDetected || strings.Contains(body, "router-a") || !strings.Contains(body, "X-Kvrouter-Hop") {
		t.Fatalf("completion through a loop: %d %s", code, body)
	}
	_, ma := Get(t, BaseURL(a)+"/metrics")
	_, mb := Get(t, BaseURL(b)+"/metrics")
	if got := metricSum(mb, `kvrouter_proxy_requests_total{outcome="loop"}`); got != 1 {
		t.Fatalf("b refused %v looped requests, want 1", got)
	}
	// Exactly one completion on each router: the client's on a (b's
	// 508 relayed), the forwarded one on b.
	for name, exp := range map[string]string{"a": ma, "b": mb} {
		for code, want := range map[string]float64{"200": 0, "502": 0, "508": 1} {
			if got := metricSum(exp, `kvrouter_http_requests_total{code="`+code+`",endpoint="completions"}`); got != want {
				t.Errorf("%s answered %v completions with %s, want %v", name, got, code, want)
			}
		}
	}
}

// closedWithin reads c until the server closes it; an error if our own
// read deadline fires first.
func closedWithin(c net.Conn, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("still open after %v", d)
	}
	return nil
}

// The HTTP timeouts close connections that send headers or a body too
// slowly and keep-alive connections left idle, while /route keeps being
// answered.
func TestHTTPTimeoutsCloseSlowConnections(t *testing.T) {
	rep := StartReplica(t, func(c *config.Config) {
		c.HTTPReadHeaderTimeout = 300 * time.Millisecond
		c.HTTPReadTimeout = 600 * time.Millisecond
		c.HTTPIdleTimeout = 600 * time.Millisecond
	})
	base := BaseURL(rep)
	if code, body, _ := send(t, "POST", base+"/workers", "", fmt.Sprintf(staticWorker, 1)); code != http.StatusOK {
		t.Fatalf("register: %d %s", code, body)
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", rep.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var slow []net.Conn
	for i := 0; i < 20; i++ {
		h, b := dial(), dial()
		_, _ = io.WriteString(h, "POST /route HTTP/1.1\r\nHost: x\r\n")
		_, _ = io.WriteString(b, "POST /route HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"token_ids\":[")
		slow = append(slow, h, b)
	}
	idle := dial()
	_, _ = io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(idle), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz on the idle connection: %v %v", resp, err)
	}
	route := `{"token_ids":[1,2,3],"update_states":false}`
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if code, body, _ := send(t, "POST", base+"/route", "", route); code != http.StatusOK {
			return fmt.Errorf("route: %d %s", code, body)
		}
		return nil
	})
	for i, c := range append(slow, idle) {
		if err := closedWithin(c, 5*time.Second); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	// Our pooled keep-alive connections idled past the server's idle
	// timeout meanwhile and were closed by it; a POST is not retried on a
	// dead pooled connection, so start afresh.
	sendClient.CloseIdleConnections()
	if code, body, _ := send(t, "POST", base+"/route", "", route); code != http.StatusOK {
		t.Fatalf("route after the closures: %d %s", code, body)
	}
}
