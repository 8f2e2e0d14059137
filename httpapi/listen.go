package httpapi

import (
	"net"
	"sync"
	"time"
)

// Server limits that are not knobs.
const (
	// MaxHeaderBytes bounds a request's header block (net/http's default
	// is 1 MiB, which times the connection cap is a lot of memory an
	// anonymous client can pin for ReadHeaderTimeout).
	MaxHeaderBytes = 64 << 10
	// AdminMaxConns caps the --admin-addr listener's connections.
	AdminMaxConns = 64
)

// Timeouts are the HTTP server's timeouts.
type Timeouts struct {
	// ReadHeader bounds reading a request's headers.
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included.
	Read time.Duration
	// Write bounds one write to a client: the deadline is renewed as a
	// response makes progress (see statusWriter), so a proxied stream may
	// last for minutes while a client that stops reading is cut.
	Write time.Duration
	// Idle bounds a keep-alive connection's wait for its next request.
	Idle time.Duration
}

// LimitListener caps the connections open at once from ln: Accept waits
// for one to close when max are open (as golang.org/x/net/netutil's), so
// extra clients queue in the kernel's backlog instead of each pinning a
// goroutine and buffers. max <= 0 returns ln.
func LimitListener(ln net.Listener, max int) net.Listener {
	if max <= 0 {
		return ln
	}
	return &limitListener{Listener: ln, sem: make(chan struct{}, max), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite keeps net/http's half-close on a capped TCP connection.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
