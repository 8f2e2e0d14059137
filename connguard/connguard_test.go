package connguard

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

type refusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *refusals) add(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[reason]++
}

func (r *refusals) get(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[reason]
}

// serve accepts on a guarded loopback listener and hands each connection
// to the test.
func serve(t *testing.T, cfg Config) (*Listener, chan *Conn, *refusals) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ref := &refusals{}
	cfg.OnRefuse = ref.add
	cfg.Log = slog.New(slog.DiscardHandler)
	gl := Wrap(ln, cfg)
	t.Cleanup(func() { _ = gl.Close() })
	conns := make(chan *Conn, 64)
	go func() {
		for {
			c, err := gl.Accept()
			if err != nil {
				return
			}
			conns <- c.(*Conn)
		}
	}()
	return gl, conns, ref
}

func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedByServer reports whether the server closed c within d.
func closedByServer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestPerClientCap(t *testing.T) {
	gl, conns, ref := serve(t, Config{MaxPerClient: 2, RefuseMessage: []byte("busy"),
		Exempt: []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")}})
	addr := gl.Addr().String()
	a1, a2 := dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)
	<-conns
	s2 := <-conns
	a3 := dialFrom(t, "127.0.0.1", addr) // over the cap
	got, _ := io.ReadAll(a3)
	if string(got) != "busy" {
		t.Fatalf("refused connection read %q, want the refusal message", got)
	}
	// The refusal is counted once the refused connection is closed, which
	// the client may see first.
	for deadline := time.Now().Add(2 * time.Second); ref.get(ReasonPerClientCap) != 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := ref.get(ReasonPerClientCap); n != 1 {
		t.Fatalf("per-client refusals %d, want 1", n)
	}
	// Another address, and an exempt one, are not affected.
	dialFrom(t, "127.0.0.2", addr)
	<-conns
	for range 3 {
		dialFrom(t, "127.0.0.3", addr)
		<-conns
	}
	if gl.Clients() != 2 {
		t.Fatalf("clients %d, want 2 (the exempt address is not tracked)", gl.Clients())
	}
	// A closed connection frees its client's slot.
	_ = s2.Close()
	dialFrom(t, "127.0.0.1", addr)
	select {
	case <-conns:
	case <-time.After(2 * time.Second):
		t.Fatal("a freed slot was not reused")
	}
	if !closedByServer(a2, time.Second) || closedByServer(a1, 50*time.Millisecond) {
		t.Fatal("the closed connection stayed open or an admitted one was closed")
	}
}

func TestClientKeyGroupsIPv6By64(t *testing.T) {
	a := ClientKey(netip.MustParseAddr("2001:db8:1:2:aaaa::1"))
	b := ClientKey(netip.MustParseAddr("2001:db8:1:2:ffff::9"))
	c := ClientKey(netip.MustParseAddr("2001:db8:1:3::1"))
	if a != b || a == c {
		t.Fatalf("keys %v %v %v: want one /64 per key", a, b, c)
	}
	if k := ClientKey(netip.MustParseAddr("::ffff:10.1.2.3")); k != netip.MustParseAddr("10.1.2.3") {
		t.Fatalf("mapped IPv4 key %v", k)
	}
}

// A connection that is not authenticated when its armed idle timer fires
// is closed and counted; an authenticated one, or one whose timer was
// disarmed, stays.
func TestUnauthenticatedIdle(t *testing.T) {
	gl, conns, ref := serve(t, Config{UnauthIdle: 100 * time.Millisecond, ArmOnAccept: true})
	addr := gl.Addr().String()
	idle := dialFrom(t, "127.0.0.1", addr)
	<-conns
	authed := dialFrom(t, "127.0.0.1", addr)
	(<-conns).MarkAuthenticated()
	busy := dialFrom(t, "127.0.0.1", addr)
	(<-conns).DisarmIdle()
	if !closedByServer(idle, 2*time.Second) {
		t.Fatal("an idle unauthenticated connection stayed open")
	}
	if closedByServer(authed, 300*time.Millisecond) || closedByServer(busy, 10*time.Millisecond) {
		t.Fatal("an authenticated or busy connection was closed")
	}
	if n := ref.get(ReasonUnauthIdle); n != 1 {
		t.Fatalf("idle refusals %d, want 1", n)
	}
}

// AuthFailed(true) closes the connection after the grace; Lookup finds a
// connection by its remote address.
func TestAuthFailedCloses(t *testing.T) {
	gl, conns, ref := serve(t, Config{})
	c := dialFrom(t, "127.0.0.1", gl.Addr().String())
	sc := <-conns
	if gl.Lookup(c.LocalAddr()) != sc {
		t.Fatal("Lookup did not find the connection")
	}
	start := time.Now()
	sc.AuthFailed(true)
	if !closedByServer(c, 2*time.Second) {
		t.Fatal("connection not closed after an authentication failure")
	}
	if d := time.Since(start); d < AuthFailGrace/2 {
		t.Fatalf("closed after %v, before the grace", d)
	}
	if n := ref.get(ReasonAuthFailed); n != 1 {
		t.Fatalf("auth-failure refusals %d, want 1", n)
	}
}

// The total cap makes Accept wait; Close releases a waiting Accept.
func TestTotalCap(t *testing.T) {
	gl, conns, _ := serve(t, Config{MaxConns: 1})
	dialFrom(t, "127.0.0.1", gl.Addr().String())
	first := <-conns
	dialFrom(t, "127.0.0.2", gl.Addr().String())
	select {
	case <-conns:
		t.Fatal("accepted past the total cap")
	case <-time.After(100 * time.Millisecond):
	}
	_ = first.Close()
	select {
	case <-conns:
	case <-time.After(2 * time.Second):
		t.Fatal("a freed slot was not used")
	}
}
