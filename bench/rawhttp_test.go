package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer counts the TCP connections its clients open.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func newConn(t *testing.T, url string, timeout time.Duration) *RawHTTPConn {
	t.Helper()
	c, err := NewRawHTTPConn(url, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestRawHTTPConnPostsAndKeepsAlive(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s %d %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.ContentLength, body)
	})
	c := newConn(t, srv.URL, 5*time.Second)
	for i := range 5 {
		body := fmt.Sprintf(`{"i":%d}`, i)
		status, err := c.Post(context.Background(), "/route", []byte(body))
		if err != nil || status != 200 {
			t.Fatalf("post %d: status %d, %v", i, status, err)
		}
		want := fmt.Sprintf("POST /route application/json %d %s", len(body), body)
		if string(c.Body) != want {
			t.Fatalf("post %d: server saw %q, want %q", i, c.Body, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 posts opened %d connections, want 1 (keep-alive)", n)
	}
}

func TestRawHTTPConnSendsBearerToken(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("Authorization"))
	})
	c := newConn(t, srv.URL, 5*time.Second)
	if _, err := c.Post(context.Background(), "/route", nil); err != nil || len(c.Body) != 0 {
		t.Fatalf("without a token the server saw %q, %v", c.Body, err)
	}
	c.SetBearer("s3cret-token-0123456789")
	if _, err := c.Post(context.Background(), "/route", nil); err != nil || string(c.Body) != "Bearer s3cret-token-0123456789" {
		t.Fatalf("the server saw %q, %v", c.Body, err)
	}
}

func TestRawHTTPConnReadsStatusAndChunkedBodies(t *testing.T) {
	big := strings.Repeat("x", 40_000) // beyond the read buffer
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			io.WriteString(w, "first,")
			w.(http.Flusher).Flush() // forces chunked encoding
			io.WriteString(w, big)
		case "/busy":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":"overloaded"}`)
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		}
	})
	c := newConn(t, srv.URL, 5*time.Second)
	status, err := c.Post(context.Background(), "/chunked", nil)
	if err != nil || status != 200 || string(c.Body) != "first,"+big {
		t.Fatalf("chunked: status %d, %d body bytes, %v", status, len(c.Body), err)
	}
	status, err = c.Post(context.Background(), "/busy", []byte("{}"))
	if err != nil || status != 429 || string(c.Body) != `{"error":"overloaded"}` {
		t.Fatalf("429: status %d body %q, %v", status, c.Body, err)
	}
	status, err = c.Post(context.Background(), "/empty", nil)
	if err != nil || status != 204 || len(c.Body) != 0 {
		t.Fatalf("204: status %d body %q, %v", status, c.Body, err)
	}
	// The connection is still usable after all three.
	if status, err := c.Post(context.Background(), "/busy", nil); err != nil || status != 429 {
		t.Fatalf("after: status %d, %v", status, err)
	}
}

func TestRawHTTPConnRedialsAfterServerClose(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bye" {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, "ok")
	})
	c := newConn(t, srv.URL, 5*time.Second)
	if _, err := c.Post(context.Background(), "/bye", nil); err != nil {
		t.Fatal(err)
	}
	// The server said close: the next post dials again.
	if status, err := c.Post(context.Background(), "/x", nil); err != nil || status != 200 {
		t.Fatalf("after Connection: close: %d, %v", status, err)
	}
	// The server drops the idle keep-alive connection: the post retries
	// once on a new one instead of failing.
	srv.CloseClientConnections()
	if status, err := c.Post(context.Background(), "/x", nil); err != nil || status != 200 {
		t.Fatalf("after the server closed the idle connection: %d, %v", status, err)
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

func TestRawHTTPConnTimeout(t *testing.T) {
	stop := make(chan struct{})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		<-stop
	})
	defer close(stop)
	c := newConn(t, srv.URL, 50*time.Millisecond)
	_, err := c.Post(context.Background(), "/slow", []byte("{}"))
	if !errors.Is(err, ErrHTTPTimeout) {
		t.Fatalf("error %v, want a timeout", err)
	}
}

func TestRawHTTPConnConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newConn(t, "http://"+addr, time.Second)
	if _, err := c.Post(context.Background(), "/route", nil); err == nil || errors.Is(err, ErrHTTPTimeout) {
		t.Fatalf("error %v, want a connection error", err)
	}
}

func TestParseTargetURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":  "127.0.0.1:8080",
		"http://127.0.0.1:8080/": "127.0.0.1:8080",
		"http://router":          "router:80",
	} {
		u, err := ParseTargetURL(in)
		if err != nil || u.Host != want {
			t.Errorf("%s: host %v, %v; want %s", in, u, err, want)
		}
	}
	for in, why := range map[string]string{
		"https://127.0.0.1:8080":      "https",
		"127.0.0.1:8080":              "http://",
		"http://":                     "no host",
		"http://127.0.0.1:8080/route": "base URL",
		"http://h:1?x=1":              "base URL",
		"":                            "http://",
	} {
		_, err := ParseTargetURL(in)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: error %v, want one mentioning %q", in, err, why)
		}
	}
}

func TestParseStatusLine(t *testing.T) {
	if code, err := parseStatusLine([]byte("HTTP/1.1 503 Service Unavailable\r\n")); err != nil || code != 503 {
		t.Errorf("503 line: %d, %v", code, err)
	}
	for _, bad := range []string{"HTTP/2 200 OK\r\n", "SSH-2.0-x\r\n", "HTTP/1.1 2x0 OK\r\n", "HTTP/1.1\r\n"} {
		if _, err := parseStatusLine([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
