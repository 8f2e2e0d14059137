package replica

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvrouter/kvrouter/kvclient"
)

// The attacker's and the well-behaved client's source addresses: both
// loopback (127/8 is all local on Linux), different clients to the router.
var (
	attackerIP = net.ParseIP("127.0.0.1")
	clientIP   = net.ParseIP("127.0.0.2")
)

// holdConns opens n connections to addr from attackerIP and keeps them
// open until the test ends; hello (if any) is written on each first.
// It returns how many the router closed within settle (refused).
func holdConns(t *testing.T, addr string, n int, hello []byte, settle time.Duration) int {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(2*n+1024) {
		t.Skipf("the file descriptor limit %d is too low to hold %d connections", lim.Cur, n)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: attackerIP}, Timeout: 5 * time.Second}
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("attacker dial %d: %v", len(conns), err)
		}
		if len(hello) > 0 {
			_, _ = c.Write(hello)
		}
		conns = append(conns, c)
	}
	// A connection the router refused reads EOF (or a reset) at once;
	// one it holds times out.
	var mu sync.Mutex
	closed := 0
	var wg sync.WaitGroup
	deadline := time.Now().Add(settle)
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(deadline)
			buf := make([]byte, 4096)
			for {
				_, err := c.Read(buf)
				if err == nil {
					continue
				}
				if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
					mu.Lock()
					closed++
					mu.Unlock()
				}
				return
			}
		})
	}
	wg.Wait()
	return closed
}

// latencies runs call n times and returns its p50, p99 and error count;
// it stops after 5 errors (a blocked client would wait out each call's
// timeout).
func latencies(n int, call func() error) (p50, p99 time.Duration, errs int, first error) {
	var ds []time.Duration
	for range n {
		start := time.Now()
		if err := call(); err != nil {
			errs++
			if first == nil {
				first = err
			}
			if errs == 5 {
				break
			}
			continue
		}
		ds = append(ds, time.Since(start))
	}
	if len(ds) == 0 {
		return 0, 0, errs, first
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)], errs, first
}

// One address holding thousands of HTTP connections (idle, or after a
// 401 on keep-alive) does not block a client from another address: past
// its per-client share the holder's connections are closed at once, and
// the listener's total cap keeps room for others. The total cap is set
// low so the test is small; the per-client cap is the listener's
// default eighth of it.
func TestHTTPConnHolderDoesNotBlockOthers(t *testing.T) {
	cfg := testConfig(t)
	cfg.ZMQEvents = false
	cfg.HTTPMaxConns = 256
	cfg.HTTPMaxConnsPerClient = 32
	tokenFile := filepath.Join(t.TempDir(), "api-tokens")
	const token = "fair-slots-token-0123456789"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.APITokenFile = tokenFile
	r, err := Start(context.Background(), cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	addr := r.HTTPAddr()

	// Half the holder's connections sent nothing; half asked without a
	// token on keep-alive (a 401 closes those at once now).
	const held = 2000
	unauth := []byte("GET /workers HTTP/1.1\r\nHost: x\r\n\r\n")
	closed401 := holdConns(t, addr, held/2, unauth, 300*time.Millisecond)
	closedIdle := holdConns(t, addr, held/2, nil, 300*time.Millisecond)
	t.Logf("attacker at %s: %d connections, %d idle closed, %d after a 401 closed", attackerIP, held, closedIdle, closed401)

	// The well-behaved client: a fresh connection per request, with
	// the token, from another address.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: clientIP}}).DialContext,
	}}
	p50, p99, errs, first := latencies(100, func() error {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/workers", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	t.Logf("client at %s while the attacker holds its connections: up to 100 requests (stopping at 5 errors), p50 %v, p99 %v, %d errors", clientIP, p50, p99, errs)
	if errs > 0 {
		t.Fatalf("%d requests of the other client failed (first: %v)", errs, first)
	}
	if closed401 != held/2 || closedIdle < held/2-cfg.HTTPMaxConnsPerClient {
		t.Errorf("closed %d of %d connections that got a 401 (want all) and %d of %d idle ones", closed401, held/2, closedIdle, held/2)
	}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, reason := range []string{"per_client_cap", "auth_failed"} {
		if !strings.Contains(string(body), `kvrouter_conns_refused_total{listener="http",reason="`+reason+`"}`) {
			t.Errorf("no %s refusals in /metrics", reason)
		}
	}
}

// The same over gRPC: one address holding many HTTP/2 connections (each
// past its handshake, answering nothing) does not block another
// address's calls.
func TestGRPCConnHolderDoesNotBlockOthers(t *testing.T) {
	cfg := testConfig(t)
	cfg.ZMQEvents = false
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.GRPCMaxConns = 128
	cfg.GRPCMaxConnsPerClient = 16
	r, err := Start(context.Background(), cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	addr := r.GRPCAddr()

	// The HTTP/2 preface and an empty SETTINGS frame: a connection the
	// server has finished its handshake with.
	hello := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	const held = 1000
	closed := holdConns(t, addr, held, hello, 300*time.Millisecond)
	t.Logf("attacker at %s: %d HTTP/2 connections, %d closed", attackerIP, held, closed)

	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: clientIP}}
	p50, p99, errs, first := latencies(50, func() error {
		// A fresh connection per call: each goes through the listener.
		c, err := kvclient.Dial(addr, kvclient.Options{DialOptions: []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", a) }),
		}})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(c.Conn()).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return err
	})
	t.Logf("client at %s while the attacker holds its connections: up to 50 calls on fresh connections (stopping at 5 errors), p50 %v, p99 %v, %d errors", clientIP, p50, p99, errs)
	if errs > 0 {
		t.Fatalf("%d calls of the other client failed (first: %v)", errs, first)
	}
	if closed < held-cfg.GRPCMaxConnsPerClient {
		t.Errorf("only %d of %d held connections were closed", closed, held)
	}
}

// A keep-alive HTTP connection that has not passed the token check is
// closed once it idles past unauthenticated-idle-timeout; one whose
// request passed it keeps the normal idle timeout.
func TestHTTPUnauthenticatedIdle(t *testing.T) {
	cfg := testConfig(t)
	cfg.ZMQEvents = false
	cfg.UnauthIdleTimeout = 200 * time.Millisecond
	tokenFile := filepath.Join(t.TempDir(), "api-tokens")
	const token = "fair-slots-token-0123456789"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.APITokenFile = tokenFile
	r, err := Start(context.Background(), cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	request := func(req string) net.Conn {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: clientIP}}).Dial("tcp", r.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%q: %v %v", req, resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return c
	}
	probe := request("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	authed := request("GET /workers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + "\r\n\r\n")
	start := time.Now()
	closed := func(c net.Conn, within time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(within))
		_, err := c.Read(make([]byte, 1))
		ne, ok := err.(net.Error)
		return err != nil && !(ok && ne.Timeout())
	}
	if !closed(probe, 3*time.Second) {
		t.Fatal("an unauthenticated keep-alive connection outlived unauthenticated-idle-timeout")
	}
	t.Logf("unauthenticated keep-alive connection closed after %v idle", time.Since(start).Round(time.Millisecond))
	if closed(authed, 600*time.Millisecond) {
		t.Fatal("an authenticated keep-alive connection was closed by the unauthenticated idle limit")
	}
}

// A client that pings faster than the keepalive policy allows (every
// 10 s) gets its connection closed, so a ping flood costs one connection
// of the client's share and no more.
func TestGRPCPingFloodClosesConnection(t *testing.T) {
	cfg := testConfig(t)
	cfg.ZMQEvents = false
	cfg.GRPCAddr = "127.0.0.1:0"
	r, err := Start(context.Background(), cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: attackerIP}}).Dial("tcp", r.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The preface, an empty SETTINGS frame, then PING frames (type 6,
	// 8 bytes of data, stream 0) back to back.
	flood := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	for i := range 20 {
		flood = append(flood, 0, 0, 8, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(i))
	}
	if _, err := c.Write(flood); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection flooding pings was not closed")
	}
	// The GOAWAY frame (type 7) says why: ENHANCE_YOUR_CALM, too_many_pings.
	if !strings.Contains(string(got), "too_many_pings") {
		t.Errorf("closed without a too_many_pings GOAWAY (%d bytes read)", len(got))
	}
}
