package zmqevents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// deadlineTCP is the scheme ranks dial tcp:// publishers with: TCP whose
// connection carries a deadline until the rank has finished the ZMTP
// handshake. zmq4 reads the greeting and the READY command without any
// deadline, so a publisher that accepts and never speaks would hold the
// rank in Dial for ever, and with it the subscriber's Close (and the
// Manager that called it).
const deadlineTCP = "kvrouter-tcp"

var registerTransport = sync.OnceValue(func() error {
	return zmq4.RegisterTransport(deadlineTCP, deadlineTransport{})
})

// rawConnKey carries, in the socket's context, the function the transport
// hands each connection it dials to.
type rawConnKey struct{}

// withRawConn returns a context whose socket's dials call got with the
// connection made.
func withRawConn(ctx context.Context, got func(net.Conn)) context.Context {
	return context.WithValue(ctx, rawConnKey{}, got)
}

type deadlineTransport struct{}

// Dial connects over TCP and hands the connection to the function the
// socket's context carries (withRawConn), which sets its deadline.
func (deadlineTransport) Dial(ctx context.Context, dialer transport.Dialer, addr string) (net.Conn, error) {
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if got, ok := ctx.Value(rawConnKey{}).(func(net.Conn)); ok {
		got(c)
	}
	return c, nil
}

func (deadlineTransport) Listen(context.Context, string) (net.Listener, error) {
	return nil, errors.New("zmqevents: the handshake-deadline transport only dials")
}

func (deadlineTransport) Addr(ep string) (string, error) {
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return "", fmt.Errorf("zmqevents: endpoint address %q: %w", ep, err)
	}
	return net.JoinHostPort(host, port), nil
}

// dialEndpoint is the endpoint a rank dials: tcp:// through deadlineTCP,
// other transports (ipc, inproc) as they are.
func dialEndpoint(ep string) string {
	if rest, ok := strings.CutPrefix(ep, "tcp://"); ok && registerTransport() == nil {
		return deadlineTCP + "://" + rest
	}
	return ep
}

// handshakeGuard sets a deadline on the connection being dialled and
// clears it once the handshake is done.
type handshakeGuard struct {
	timeout time.Duration
	mu      sync.Mutex
	conn    net.Conn
}

func (g *handshakeGuard) dialled(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(g.timeout))
	g.mu.Lock()
	g.conn = c
	g.mu.Unlock()
}

// handshaken lifts the deadline: the connection now lives as long as the
// publisher keeps it.
func (g *handshakeGuard) handshaken() {
	g.mu.Lock()
	c := g.conn
	g.conn = nil
	g.mu.Unlock()
	if c != nil {
		_ = c.SetDeadline(time.Time{})
	}
}
