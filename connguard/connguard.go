// Package connguard shares a listener's connection slots fairly between
// client addresses. It wraps a net.Listener with:
//
//   - a total cap (Accept waits for a slot, so extra clients queue in the
//     kernel's backlog),
//   - a per-client cap: a connection from an address that already holds
//     MaxPerClient is accepted and closed at once (after an optional short
//     refusal message), so one address cannot take the slots everyone
//     shares; IPv6 clients are grouped by /64, the block one host usually
//     gets,
//   - an idle limit for connections that have not yet authenticated: the
//     server calls Conn.MarkAuthenticated when a request passes its token
//     check, and Conn.ArmIdle / Conn.DisarmIdle around the waits a client
//     could stretch; a connection that is still unauthenticated when the
//     armed timer fires is closed,
//   - Conn.AuthFailed, which counts an authentication failure and (when
//     asked) closes the connection after a grace that lets the refusal
//     reach the client.
//
// Every refusal or close goes to Config.OnRefuse with its reason (a metric)
// and to a log line limited to one per LogEvery. Memory: one map entry per
// client address with an open connection and one per open connection, both
// bounded by the total cap (or by the process's file descriptors without
// one).
package connguard

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/loglimit"
)

// Reasons passed to Config.OnRefuse (the metric's reason label).
const (
	ReasonPerClientCap = "per_client_cap"       // the address holds MaxPerClient connections
	ReasonUnauthIdle   = "unauthenticated_idle" // idle past UnauthIdle before authenticating
	ReasonAuthFailed   = "auth_failed"          // a request failed the token check
)

// AuthFailGrace is how long a connection stays open after an
// authentication failure when Conn.AuthFailed is asked to close it: long
// enough for the refusal already queued to be written.
const AuthFailGrace = 200 * time.Millisecond

// Config configures a Listener.
type Config struct {
	// Name labels the listener in logs ("http", "grpc").
	Name string
	// MaxConns caps the connections open at once (0: no cap). Accept
	// waits for a slot.
	MaxConns int
	// MaxPerClient caps the connections open at once from one client
	// address (IPv4 address, IPv6 /64); 0: no cap.
	MaxPerClient int
	// Exempt lists client prefixes the per-client cap does not apply to
	// (a load balancer that carries many clients' connections).
	Exempt []netip.Prefix
	// UnauthIdle closes a connection that has not authenticated when an
	// armed idle wait lasts this long (0: off).
	UnauthIdle time.Duration
	// ArmOnAccept arms the idle timer when a connection is accepted (for
	// servers whose connections have no request boundaries to hook, as
	// gRPC's): the connection must authenticate within UnauthIdle.
	ArmOnAccept bool
	// RefuseMessage is written (best effort, at most 100 ms) to a
	// connection refused by the per-client cap before it is closed.
	RefuseMessage []byte
	// OnRefuse counts a refusal or close (nil: not counted).
	OnRefuse func(reason string)
	// Log receives at most one line per LogEvery (nil: slog.Default).
	Log      *slog.Logger
	LogEvery time.Duration
}

// Listener is a net.Listener whose connections are *Conn.
type Listener struct {
	net.Listener
	cfg  Config
	sem  chan struct{} // nil: no total cap
	done chan struct{}
	once sync.Once
	logs loglimit.Keyed[string]

	mu        sync.Mutex
	perClient map[netip.Addr]int
	byRemote  map[string]*Conn // remote address → open connection
}

// Wrap wraps ln.
func Wrap(ln net.Listener, cfg Config) *Listener {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = 10 * time.Second
	}
	l := &Listener{Listener: ln, cfg: cfg, done: make(chan struct{}),
		perClient: map[netip.Addr]int{}, byRemote: map[string]*Conn{},
		logs: loglimit.Keyed[string]{Every: cfg.LogEvery, MaxKeys: 16}}
	if cfg.MaxConns > 0 {
		l.sem = make(chan struct{}, cfg.MaxConns)
	}
	return l
}

// Accept waits for a free slot, then for a connection that its client's
// cap admits.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if l.sem != nil {
			select {
			case l.sem <- struct{}{}:
			case <-l.done:
				return nil, net.ErrClosed
			}
		}
		c, err := l.Listener.Accept()
		if err != nil {
			l.releaseSlot()
			return nil, err
		}
		key, capped := l.clientKey(c.RemoteAddr())
		if capped && !l.admit(key) {
			l.releaseSlot()
			l.refuse(c, key)
			continue
		}
		gc := &Conn{Conn: c, l: l, key: key, capped: capped, remote: c.RemoteAddr().String()}
		l.mu.Lock()
		l.byRemote[gc.remote] = gc
		l.mu.Unlock()
		if l.cfg.ArmOnAccept {
			gc.ArmIdle()
		}
		return gc, nil
	}
}

// Close closes the listener; Accept calls waiting for a slot return.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}

// Lookup finds the open connection whose remote address is addr (as a
// server reports its peer), nil when there is none.
func (l *Listener) Lookup(addr net.Addr) *Conn {
	if addr == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byRemote[addr.String()]
}

// Clients is how many client addresses (IPv6: /64s) hold connections.
func (l *Listener) Clients() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.perClient)
}

func (l *Listener) releaseSlot() {
	if l.sem != nil {
		<-l.sem
	}
}

// clientKey is the address a per-client cap counts against; capped is
// false when the cap is off or the address is exempt.
func (l *Listener) clientKey(a net.Addr) (netip.Addr, bool) {
	if l.cfg.MaxPerClient <= 0 {
		return netip.Addr{}, false
	}
	var ip netip.Addr
	switch ta := a.(type) {
	case *net.TCPAddr:
		ip = ta.AddrPort().Addr().Unmap()
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}, false // not an IP peer (unix socket): not capped per client
		}
		ip = ap.Addr().Unmap()
	}
	for _, p := range l.cfg.Exempt {
		if p.Contains(ip) {
			return netip.Addr{}, false
		}
	}
	return ClientKey(ip), true
}

// ClientKey is the key a per-client cap counts ip against: the IPv4
// address, or the IPv6 address's /64.
func ClientKey(ip netip.Addr) netip.Addr {
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

func (l *Listener) admit(key netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perClient[key] >= l.cfg.MaxPerClient {
		return false
	}
	l.perClient[key]++
	return true
}

func (l *Listener) refuse(c net.Conn, key netip.Addr) {
	if len(l.cfg.RefuseMessage) > 0 {
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Write(l.cfg.RefuseMessage) // best effort: the client may not read it
	}
	_ = c.Close()
	l.note(ReasonPerClientCap, "connection refused: the client holds its share of connections",
		"client", key.String(), "max_per_client", l.cfg.MaxPerClient)
}

// note counts a refusal and logs it at most once per LogEvery per reason.
func (l *Listener) note(reason, msg string, args ...any) {
	if l.cfg.OnRefuse != nil {
		l.cfg.OnRefuse(reason)
	}
	if ok, _, n := l.logs.Allow(reason, time.Now()); ok {
		l.cfg.Log.Warn(msg, append(args, "listener", l.cfg.Name, "reason", reason, "similar_suppressed", n)...)
	}
}

// Conn is a connection of a Listener.
type Conn struct {
	net.Conn
	l      *Listener
	key    netip.Addr
	capped bool
	remote string

	authed  atomic.Bool
	closed  sync.Once
	timerMu sync.Mutex
	timer   *time.Timer
	shut    bool // closed: no timer may be armed
}

// Close closes the connection and frees its slots.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.closed.Do(func() {
		c.timerMu.Lock()
		c.shut = true
		if c.timer != nil {
			c.timer.Stop()
		}
		c.timerMu.Unlock()
		l := c.l
		l.mu.Lock()
		if l.byRemote[c.remote] == c {
			delete(l.byRemote, c.remote)
		}
		if c.capped {
			if n := l.perClient[c.key] - 1; n > 0 {
				l.perClient[c.key] = n
			} else {
				delete(l.perClient, c.key)
			}
		}
		l.mu.Unlock()
		l.releaseSlot()
	})
	return err
}

// CloseWrite keeps net/http's half-close on a TCP connection.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// MarkAuthenticated records that a request on c passed the token check:
// the unauthenticated idle limit no longer applies.
func (c *Conn) MarkAuthenticated() {
	if c.authed.Load() {
		return
	}
	c.authed.Store(true)
	c.DisarmIdle()
}

// Authenticated reports whether MarkAuthenticated was called.
func (c *Conn) Authenticated() bool { return c.authed.Load() }

// ArmIdle starts the unauthenticated idle timer (a no-op once
// authenticated, or with UnauthIdle 0).
func (c *Conn) ArmIdle() {
	d := c.l.cfg.UnauthIdle
	if d <= 0 || c.authed.Load() {
		return
	}
	c.timerMu.Lock()
	defer c.timerMu.Unlock()
	if c.shut {
		return
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(d, c.idleExpired)
		return
	}
	c.timer.Reset(d)
}

// DisarmIdle stops the idle timer (a request is being served).
func (c *Conn) DisarmIdle() {
	c.timerMu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timerMu.Unlock()
}

func (c *Conn) idleExpired() {
	if c.authed.Load() {
		return
	}
	c.timerMu.Lock()
	shut := c.shut
	c.timerMu.Unlock()
	if shut {
		return
	}
	c.l.note(ReasonUnauthIdle, "connection closed: idle without authenticating",
		"client", c.RemoteAddr().String(), "limit", c.l.cfg.UnauthIdle)
	_ = c.Conn.Close() // the server's read fails and it closes c, which frees the slots
}

// AuthFailed counts an authentication failure on c; with closeAfter the
// connection is closed AuthFailGrace later (the refusal is written first).
func (c *Conn) AuthFailed(closeAfter bool) {
	c.l.note(ReasonAuthFailed, "authentication failed",
		"client", c.RemoteAddr().String(), "closing", closeAfter)
	if closeAfter {
		time.AfterFunc(AuthFailGrace, func() { _ = c.Conn.Close() })
	}
}

type ctxKey struct{}

// NewContext returns ctx carrying c when it is a *Conn (for
// http.Server.ConnContext).
func NewContext(ctx context.Context, c net.Conn) context.Context {
	if gc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, ctxKey{}, gc)
	}
	return ctx
}

// FromContext returns the *Conn NewContext stored (nil: none).
func FromContext(ctx context.Context) *Conn {
	c, _ := ctx.Value(ctxKey{}).(*Conn)
	return c
}

// HTTPConnState is an http.Server.ConnState hook: the unauthenticated
// idle timer runs while a keep-alive connection waits for its next
// request (a new connection's first request is bounded by the server's
// ReadHeaderTimeout instead).
func HTTPConnState(c net.Conn, st http.ConnState) {
	gc, ok := c.(*Conn)
	if !ok {
		return
	}
	switch st {
	case http.StateIdle:
		gc.ArmIdle()
	case http.StateActive:
		gc.DisarmIdle()
	}
}
