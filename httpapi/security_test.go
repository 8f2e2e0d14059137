package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/actors"
	itu "github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/netpolicy"
)

const (
	adminToken = "admin-token-0123456789abcdef"
	apiToken   = "client-token-0123456789abcdef"
)

// rig is a Server on a real loopback socket, served as the replica
// serves it (same http.Server timeouts).
type rig struct {
	s      *Server
	r      *actors.Router
	m      *metrics.Router
	url    string // main listener
	admin  string // admin listener ("" unless AdminSeparate)
	ln     net.Listener
	policy *netpolicy.Policy
}

type rigOpts struct {
	workers  int
	mutate   func(*Options)
	timeouts Timeouts
	maxConns int
}

func startRig(t *testing.T, ro rigOpts) *rig {
	t.Helper()
	cfg := actors.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Shards = 2
	r, err := actors.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	for i := 1; i <= ro.workers; i++ {
		if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: uint64(i), DataParallelSize: 1}, true); err != nil {
			t.Fatal(err)
		}
	}
	waitWorkers(t, r, ro.workers)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	self := []netip.AddrPort{ln.Addr().(*net.TCPAddr).AddrPort(), aln.Addr().(*net.TCPAddr).AddrPort()}
	g := &rig{r: r, m: metrics.New(), ln: ln}
	g.policy = netpolicy.MustParse("private").WithSelf(self, nil)
	opts := Options{Router: r, Metrics: g.m, BlockSize: cfg.BlockSize, MaxBodyBytes: 1 << 20, Proxy: true,
		Log: slog.New(slog.DiscardHandler), ReplicaID: "replica-a", WorkerPolicy: g.policy, WriteTimeout: ro.timeouts.Write}
	if ro.mutate != nil {
		ro.mutate(&opts)
	}
	g.s = New(opts)
	serve := func(h http.Handler, ln net.Listener) {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: ro.timeouts.ReadHeader, ReadTimeout: ro.timeouts.Read,
			IdleTimeout: ro.timeouts.Idle, MaxHeaderBytes: MaxHeaderBytes}
		go func() { _ = srv.Serve(LimitListener(ln, ro.maxConns)) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	serve(g.s.Handler(), ln)
	g.url = "http://" + ln.Addr().String()
	if opts.AdminSeparate {
		serve(g.s.AdminHandler(), aln)
		g.admin = "http://" + aln.Addr().String()
	} else {
		_ = aln.Close()
	}
	return g
}

func waitWorkers(t testing.TB, r *actors.Router, n int) {
	t.Helper()
	itu.Eventually(t, 5*time.Second, "workers registered", func() bool {
		reg, err := r.Registry(context.Background())
		return err == nil && len(reg.Workers) == n
	})
}

func registered(t testing.TB, r *actors.Router) []uint64 {
	t.Helper()
	reg, err := r.Registry(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, w := range reg.Workers {
		ids = append(ids, w.Worker.WorkerId)
	}
	return ids
}

// call makes one request with an optional bearer token and extra
// headers; it returns the status, the decoded JSON body and the headers.
func call(t testing.TB, method, url, token, body string, hdr ...string) (int, map[string]any, http.Header) {
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
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, resp.Header
}

const addW5 = `{"worker_id":5,"url":"http://10.0.0.5:8000"}`

// A wrong or missing admin token is refused with 401 and a Bearer
// challenge, and the registry is unchanged; the data plane stays open.
func TestAdminTokenRequired(t *testing.T) {
	g := startRig(t, rigOpts{workers: 1, mutate: func(o *Options) { o.AdminTokens = StaticTokens(adminToken); o.Pprof = true }})
	for _, tok := range []string{"", "wrong-token-0123456789abcdef", adminToken + "x", adminToken[:len(adminToken)-1]} {
		code, out, h := call(t, "POST", g.url+"/workers", tok, addW5)
		if code != 401 || out["error"] == nil || !strings.HasPrefix(h.Get("WWW-Authenticate"), `Bearer realm="kvrouter-admin"`) {
			t.Fatalf("token %q: %d %v %q", tok, code, out, h.Get("WWW-Authenticate"))
		}
		if tok != "" && !strings.Contains(h.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Fatalf("token %q: challenge %q lacks invalid_token", tok, h.Get("WWW-Authenticate"))
		}
	}
	if code, _, _ := call(t, "GET", g.url+"/debug/pprof/", "", ""); code != 401 {
		t.Fatalf("pprof without token: %d", code)
	}
	if code, _, _ := call(t, "DELETE", g.url+"/workers/1", "nope-nope-nope-nope-nope", ""); code != 401 {
		t.Fatalf("delete with a wrong token: %d", code)
	}
	if ids := registered(t, g.r); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("registry changed without a valid token: %v", ids)
	}
	// Lower-case scheme is fine (RFC 7235: case-insensitive).
	if code, out, _ := call(t, "POST", g.url+"/workers", "", addW5, "Authorization", "bearer "+adminToken); code != 200 {
		t.Fatalf("valid token: %d %v", code, out)
	}
	if code, _, _ := call(t, "DELETE", g.url+"/workers/1", adminToken, ""); code != 200 {
		t.Fatalf("delete with the token: %d", code)
	}
	if code, _, _ := call(t, "GET", g.url+"/debug/pprof/", adminToken, ""); code != 200 {
		t.Fatalf("pprof with the token: %d", code)
	}
	if code, out, _ := call(t, "POST", g.url+"/route", "", `{"token_ids":[1,2,3]}`); code != 200 {
		t.Fatalf("route needs no token without --api-token-file: %d %v", code, out)
	}
	if got := testutil.ToFloat64(g.m.HTTPRequests.WithLabelValues("workers", "401")); got < 5 {
		t.Fatalf("401s counted: %v", got)
	}
}

// Without an admin token or admin listener, admin routes answer loopback
// clients only; a remote client gets 403 saying how to open them.
func TestAdminLoopbackOnlyByDefault(t *testing.T) {
	g := startRig(t, rigOpts{})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/workers", strings.NewReader(addW5))
	req.RemoteAddr = "10.1.2.3:5555"
	g.s.Handler().ServeHTTP(rec, req)
	if rec.Code != 403 || !strings.Contains(rec.Body.String(), "loopback clients only") || !strings.Contains(rec.Body.String(), "--admin-token-file") {
		t.Fatalf("remote client: %d %s", rec.Code, rec.Body)
	}
	// Over a real socket from a non-loopback address of this host.
	if ip := nonLoopbackIP(); ip != "" {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: g.s.Handler()}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		if code, out, _ := call(t, "POST", "http://"+ln.Addr().String()+"/workers", "", addW5); code != 403 {
			t.Fatalf("POST /workers from %s: %d %v", ip, code, out)
		}
		if code, _, _ := call(t, "GET", "http://"+ln.Addr().String()+"/workers", "", ""); code != 200 {
			t.Fatalf("GET /workers (data plane) from %s: %d", ip, code)
		}
	} else {
		t.Log("no non-loopback address: the real-socket remote check is skipped")
	}
	if ids := registered(t, g.r); len(ids) != 0 {
		t.Fatalf("a remote client changed the registry: %v", ids)
	}
	if code, out, _ := call(t, "POST", g.url+"/workers", "", addW5); code != 200 {
		t.Fatalf("loopback client: %d %v", code, out)
	}
}

func nonLoopbackIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
			return ipn.IP.String()
		}
	}
	return ""
}

// With --api-token-file the data plane wants a client (or admin) token;
// probes and metrics stay open.
func TestAPITokenRequired(t *testing.T) {
	g := startRig(t, rigOpts{workers: 1, mutate: func(o *Options) {
		o.APITokens = StaticTokens(apiToken)
		o.AdminTokens = StaticTokens(adminToken)
	}})
	body := `{"token_ids":[1,2,3],"update_states":false}`
	for _, tok := range []string{"", "not-the-client-token-000000"} {
		code, out, h := call(t, "POST", g.url+"/route", tok, body)
		if code != 401 || out["error"] == nil || !strings.HasPrefix(h.Get("WWW-Authenticate"), `Bearer realm="kvrouter"`) {
			t.Fatalf("route with token %q: %d %v %q", tok, code, out, h.Get("WWW-Authenticate"))
		}
	}
	for _, path := range []string{"/free", "/prefill_done", "/overlap_scores", "/potential_loads", "/v1/completions"} {
		if code, _, _ := call(t, "POST", g.url+path, "", `{}`); code != 401 {
			t.Fatalf("POST %s without a token: %d", path, code)
		}
	}
	if code, _, _ := call(t, "GET", g.url+"/workers", "", ""); code != 401 {
		t.Fatalf("GET /workers without a token: %d", code)
	}
	for _, method := range []string{"GET", "DELETE"} {
		if code, _, _ := call(t, method, g.url+"/sessions/s1", "", ""); code != 401 {
			t.Fatalf("%s /sessions/s1 without a token: %d", method, code)
		}
		// With one: 404 (no such session), past the gate.
		if code, out, _ := call(t, method, g.url+"/sessions/s1", apiToken, ""); code != 404 || out["error"] == nil {
			t.Fatalf("%s /sessions/s1 with the client token: %d %v", method, code, out)
		}
	}
	for _, tok := range []string{apiToken, adminToken} {
		if code, out, _ := call(t, "POST", g.url+"/route", tok, body); code != 200 {
			t.Fatalf("route with %q: %d %v", tok, code, out)
		}
	}
	// The client token is not an admin token.
	if code, _, _ := call(t, "POST", g.url+"/workers", apiToken, addW5); code != 401 {
		t.Fatalf("POST /workers with the client token: %d", code)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _, _ := call(t, "GET", g.url+path, "", ""); code != 200 {
			t.Fatalf("GET %s: %d", path, code)
		}
	}
}

// With AdminSeparate the admin routes are served on the admin listener
// only; the data listener answers 404 and changes nothing.
func TestAdminRoutesOnlyOnAdminListener(t *testing.T) {
	g := startRig(t, rigOpts{workers: 1, mutate: func(o *Options) { o.AdminSeparate = true; o.Pprof = true }})
	code, out, _ := call(t, "POST", g.url+"/workers", "", addW5)
	if code != 404 || !strings.Contains(fmt.Sprint(out["error"]), "admin listener") {
		t.Fatalf("POST /workers on the data listener: %d %v", code, out)
	}
	for _, c := range []struct{ method, path string }{{"DELETE", "/workers/1"}, {"GET", "/debug/pprof/"}} {
		if code, _, _ := call(t, c.method, g.url+c.path, "", ""); code != 404 {
			t.Fatalf("%s %s on the data listener: %d", c.method, c.path, code)
		}
	}
	if ids := registered(t, g.r); len(ids) != 1 {
		t.Fatalf("registry changed through the data listener: %v", ids)
	}
	if code, out, _ := call(t, "POST", g.admin+"/workers", "", addW5); code != 200 {
		t.Fatalf("POST /workers on the admin listener: %d %v", code, out)
	}
	if code, _, _ := call(t, "GET", g.admin+"/debug/pprof/", "", ""); code != 200 {
		t.Fatalf("pprof on the admin listener: %d", code)
	}
	for _, path := range []string{"/workers", "/healthz", "/metrics"} {
		if code, _, _ := call(t, "GET", g.admin+path, "", ""); code != 200 {
			t.Fatalf("GET %s on the admin listener: %d", path, code)
		}
	}
	// The data plane is not on the admin listener.
	if code, _, _ := call(t, "POST", g.admin+"/route", "", `{"token_ids":[1]}`); code != 404 {
		t.Fatalf("POST /route on the admin listener: %d", code)
	}
	if code, _, _ := call(t, "POST", g.url+"/route", "", `{"token_ids":[1]}`); code != 200 {
		t.Fatalf("POST /route on the data listener: %d", code)
	}
}

// Worker URLs that are not http(s), carry userinfo, lie outside the allow
// list, name a metadata address or this router's own listener are 400 and
// never reach the registry.
func TestWorkerURLPolicy(t *testing.T) {
	g := startRig(t, rigOpts{})
	port := g.ln.Addr().(*net.TCPAddr).Port
	for _, u := range []string{
		"file:///etc/passwd", "gopher://10.0.0.5:70", "http://user:secret@10.0.0.5:8000",
		"http://8.8.8.8:8000", "http://169.254.169.254/latest/meta-data",
		g.url, fmt.Sprintf("http://localhost:%d", port), fmt.Sprintf("http://[::ffff:127.0.0.1]:%d", port),
	} {
		code, out, _ := call(t, "POST", g.url+"/workers", "", fmt.Sprintf(`{"worker_id":7,"url":%q}`, u))
		if code != 400 || out["error"] == nil {
			t.Fatalf("worker URL %q: %d %v", u, code, out)
		}
	}
	if ids := registered(t, g.r); len(ids) != 0 {
		t.Fatalf("refused URLs reached the registry: %v", ids)
	}
	for reason, want := range map[string]float64{"url_invalid": 3, "url_not_allowed": 2, "url_self": 3} {
		if got := workerRejected(t, g.m, reason); got != want {
			t.Errorf("worker_rejected{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if code, out, _ := call(t, "POST", g.url+"/workers", "", `{"worker_id":7,"url":"http://127.0.0.1:9"}`); code != 200 {
		t.Fatalf("a loopback worker on another port: %d %v", code, out)
	}
}

func workerRejected(t testing.TB, m *metrics.Router, reason string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kvrouter_workers_rejected_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// fakeWorker streams SSE lines for every completion and records the
// hop headers it saw.
type fakeWorker struct {
	srv   *httptest.Server
	hits  atomic.Int64
	hops  chan string
	lines int
	gap   time.Duration
	big   bool // stream megabytes as fast as it can
}

func startFakeWorker(t *testing.T, lines int, gap time.Duration) *fakeWorker {
	f := &fakeWorker{hops: make(chan string, 100), lines: lines, gap: gap}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		f.hops <- r.Header.Get(HopHeader)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		chunk := "data: {\"x\":1}\n\n"
		if f.big {
			chunk = "data: {\"x\":\"" + strings.Repeat("y", 64<<10) + "\"}\n\n"
		}
		for i := 0; i < f.lines; i++ {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
			fl.Flush()
			if f.gap > 0 {
				time.Sleep(f.gap)
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func registerURL(t testing.TB, r *actors.Router, id uint64, url string) {
	t.Helper()
	if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: id, Url: url, DataParallelSize: 1}, true); err != nil {
		t.Fatal(err)
	}
}

// The proxy marks what it forwards, and refuses (508) a completion that
// carries a router's mark, so a worker URL leading back to a router costs
// one hop, not a loop.
func TestProxyHopHeader(t *testing.T) {
	g := startRig(t, rigOpts{})
	fw := startFakeWorker(t, 2, 0)
	registerURL(t, g.r, 1, fw.srv.URL)
	waitWorkers(t, g.r, 1)
	code, _, _ := call(t, "POST", g.url+"/v1/completions", "", `{"prompt":[1,2,3],"max_tokens":2,"stream":true}`)
	if code != 200 || fw.hits.Load() != 1 {
		t.Fatalf("completion: %d, worker hits %d", code, fw.hits.Load())
	}
	if hop := <-fw.hops; hop != "replica-a" {
		t.Fatalf("forwarded %s = %q, want the replica id", HopHeader, hop)
	}
	code, out, _ := call(t, "POST", g.url+"/v1/completions", "", `{"prompt":[1,2,3]}`, HopHeader, "replica-b")
	// The answer does not name the replica that forwarded it (a client
	// must not learn the fleet's replica ids from it).
	if code != http.StatusLoopDetected || strings.Contains(fmt.Sprint(out["error"]), "replica-b") ||
		!strings.Contains(fmt.Sprint(out["error"]), HopHeader) {
		t.Fatalf("marked request: %d %v", code, out)
	}
	if fw.hits.Load() != 1 {
		t.Fatalf("a marked request reached the worker (%d hits)", fw.hits.Load())
	}
	if got := testutil.ToFloat64(g.m.ProxyRequests.WithLabelValues("loop")); got != 1 {
		t.Fatalf("proxy outcome loop = %v", got)
	}
}

// A worker URL that reached the registry without the HTTP check (an
// older registration, a name that now resolves elsewhere) is still
// never dialed when it leads to the router itself: the dialer checks the
// address it connects to.
func TestProxyDialGuard(t *testing.T) {
	g := startRig(t, rigOpts{})
	registerURL(t, g.r, 1, g.url)
	registerURL(t, g.r, 2, "http://169.254.169.254:80")
	waitWorkers(t, g.r, 2)
	code, out, _ := call(t, "POST", g.url+"/v1/completions", "", `{"prompt":[1,2,3]}`)
	if code != http.StatusBadGateway {
		t.Fatalf("completion to self/metadata workers: %d %v", code, out)
	}
	if got := testutil.ToFloat64(g.m.HTTPRequests.WithLabelValues("completions", "508")); got != 0 {
		t.Fatalf("the router forwarded to itself (%v loop answers)", got)
	}
	if got := testutil.ToFloat64(g.m.HTTPRequests.WithLabelValues("completions", "502")); got != 1 {
		t.Fatalf("completions answered 502: %v, want exactly 1 (no forwarded request came back)", got)
	}
}

// readUntilClosed reads c until the server closes it and reports whether
// it did within d (a timeout of our own read means it did not).
func readUntilClosed(c net.Conn, d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	raw, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return string(raw), fmt.Errorf("connection still open after %v: %w", d, err)
	}
	return string(raw), nil // io.EOF (ReadAll returns nil) or a reset: closed
}

func dialRaw(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Slow headers, slow bodies and idle keep-alive connections are closed by
// the server's timeouts, while ordinary requests keep being served.
func TestTimeoutsCloseSlowAndIdleConnections(t *testing.T) {
	g := startRig(t, rigOpts{workers: 1, timeouts: Timeouts{
		ReadHeader: 300 * time.Millisecond, Read: 600 * time.Millisecond, Idle: 600 * time.Millisecond, Write: time.Second,
	}})
	slowHeader := dialRaw(t, g.url)
	_, _ = io.WriteString(slowHeader, "POST /route HTTP/1.1\r\nHost: x\r\n")
	slowBody := dialRaw(t, g.url)
	_, _ = io.WriteString(slowBody, "POST /route HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"token_ids\":[1,")
	idle := dialRaw(t, g.url)
	_, _ = io.WriteString(idle, "POST /route HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n{\"token_ids\":[1,2,3,4,5,6,7]}\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request on the idle connection: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	// Meanwhile ordinary requests are served.
	for i := 0; i < 3; i++ {
		if code, out, _ := call(t, "POST", g.url+"/route", "", `{"token_ids":[1,2,3],"update_states":false}`); code != 200 {
			t.Fatalf("route while slow connections are held: %d %v", code, out)
		}
	}
	for name, c := range map[string]net.Conn{"slow header": slowHeader, "slow body": slowBody, "idle": idle} {
		got, err := readUntilClosed(c, 5*time.Second)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if name == "slow body" && !strings.Contains(got, "400") && got != "" {
			t.Errorf("slow body answered %q", got)
		}
	}
	// The client's pooled keep-alive connections idled past the server's
	// idle timeout meanwhile and were closed by it (as they should be): a
	// POST is not retried on a dead pooled connection, so start afresh.
	http.DefaultClient.CloseIdleConnections()
	if code, _, _ := call(t, "POST", g.url+"/route", "", `{"token_ids":[1,2,3],"update_states":false}`); code != 200 {
		t.Fatalf("route after the closures: %d", code)
	}
}

// The write timeout bounds each write, not the response: a proxied stream
// that lasts several write timeouts is delivered whole, while a client
// that stops reading a stream is cut and its request freed.
func TestWriteTimeoutIsPerWrite(t *testing.T) {
	g := startRig(t, rigOpts{timeouts: Timeouts{ReadHeader: time.Second, Read: time.Second, Idle: time.Second, Write: 300 * time.Millisecond}})
	slow := startFakeWorker(t, 10, 120*time.Millisecond) // 1.2 s of stream, 4 write timeouts
	registerURL(t, g.r, 1, slow.srv.URL)
	waitWorkers(t, g.r, 1)
	resp, err := http.Post(g.url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":[1,2,3],"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || strings.Count(string(raw), "data: ") != 11 || !strings.Contains(string(raw), "[DONE]") {
		t.Fatalf("long stream: %d %v, %d lines", resp.StatusCode, err, strings.Count(string(raw), "data: "))
	}

	// A client that never reads a large stream.
	big := startFakeWorker(t, 4096, 0) // 256 MiB if nothing stops it
	big.big = true
	if err := g.r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: 1, Url: big.srv.URL, DataParallelSize: 1}, true); err != nil {
		t.Fatal(err)
	}
	g.s.forgetURLs()
	itu.Eventually(t, 5*time.Second, "worker URL updated", func() bool {
		u, err := g.s.workerURL(context.Background(), 1)
		return err == nil && u == big.srv.URL
	})
	c := dialRaw(t, g.url)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	body := `{"prompt":[1,2,3],"stream":true}`
	_, _ = fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	itu.Eventually(t, 10*time.Second, "the stalled stream is cut (client_gone)", func() bool {
		return testutil.ToFloat64(g.m.ProxyRequests.WithLabelValues("client_gone")) == 1
	})
	itu.Eventually(t, 5*time.Second, "the request is freed", func() bool {
		reg, err := g.r.Status(context.Background(), false)
		if err != nil {
			return false
		}
		n := uint32(0)
		for _, w := range reg.Workers {
			for _, rk := range w.Ranks {
				n += rk.ActiveRequests
			}
		}
		return n == 0
	})
}

// The connection cap makes a client beyond it wait for a connection to
// close; it is then served.
func TestConnectionCap(t *testing.T) {
	g := startRig(t, rigOpts{workers: 1, maxConns: 2, timeouts: Timeouts{ReadHeader: 5 * time.Second, Idle: 30 * time.Second}})
	a, b := dialRaw(t, g.url), dialRaw(t, g.url)
	for _, c := range []net.Conn{a, b} {
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", resp, err)
		}
	}
	third := make(chan int, 1)
	go func() {
		client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
		resp, err := client.Get(g.url + "/healthz")
		if err != nil {
			third <- -1
			return
		}
		resp.Body.Close()
		third <- resp.StatusCode
	}()
	select {
	case code := <-third:
		t.Fatalf("a third connection was served past the cap of 2: %d", code)
	case <-time.After(300 * time.Millisecond):
	}
	_ = a.Close()
	select {
	case code := <-third:
		if code != 200 {
			t.Fatalf("third connection after one closed: %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the third connection was not served after one closed")
	}
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	write := func(s string, mod time.Time) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"", "\n# only a comment\n", "short\n"} {
		write(bad, time.Now())
		if _, err := LoadTokens(path, nil); err == nil {
			t.Fatalf("LoadTokens(%q): no error", bad)
		}
	}
	if _, err := LoadTokens(filepath.Join(dir, "missing"), nil); err == nil {
		t.Fatal("missing file: no error")
	}
	old, next := "first-token-0123456789abcdef", "second-token-0123456789abcdef"
	write("# kvrouter admin tokens\n"+old+"\n", time.Now().Add(-time.Hour))
	tk, err := LoadTokens(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !tk.Valid(old) || tk.Valid(next) || tk.Valid("") || tk.Valid(old[:20]) {
		t.Fatal("initial token set")
	}
	// Rotation: both tokens, then only the new one.
	write(old+"\n"+next+"\n", time.Now().Add(-30*time.Minute))
	tk.checked.Store(0)
	if !tk.Valid(old) || !tk.Valid(next) {
		t.Fatal("rotated file not re-read")
	}
	// A broken rewrite keeps the previous tokens.
	write("tiny\n", time.Now().Add(-20*time.Minute))
	tk.checked.Store(0)
	if !tk.Valid(next) {
		t.Fatal("an unusable rewrite dropped the tokens")
	}
	write(next+"\n", time.Now().Add(-10*time.Minute))
	tk.checked.Store(0)
	if tk.Valid(old) || !tk.Valid(next) {
		t.Fatal("old token still valid after its removal")
	}
}

func TestLimitListenerReleasesOnClose(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := LimitListener(inner, 1)
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	c1, _ := net.Dial("tcp", inner.Addr().String())
	defer c1.Close()
	s1 := <-accepted
	c2, _ := net.Dial("tcp", inner.Addr().String())
	defer c2.Close()
	select {
	case <-accepted:
		t.Fatal("accepted past the cap")
	case <-time.After(100 * time.Millisecond):
	}
	_ = s1.Close()
	_ = s1.Close() // a second close releases nothing more
	select {
	case s2 := <-accepted:
		_ = s2.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("not accepted after a close")
	}
	_ = ln.Close()
	for range accepted {
	}
}
