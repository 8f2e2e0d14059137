package cluster

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Gossip batches go over one persistent TCP connection per peer when the
// peer advertises a stream port (node metadata "sp"). memberlist's own
// reliable path dials a fresh TCP connection for every message, and its
// UDP path loses and reorders; a persistent stream costs one write per
// batch and keeps a peer's batches in order. Without a stream (the
// connection failing, or a peer refusing it) sends fall back to
// memberlist.
//
// A stream opens with a handshake:
//
//	TLS (with keys or certificate files: see trust.go)
//	server → client  "KVRS" version challenge[32]
//	client → server  "KVRH" version label from to signature[64]
//	server → client  ack (0: accepted)
//
// The signature is the client's boot key (advertised in its memberlist
// metadata, which only key holders can write) over the challenge, the TLS
// exporter, the label and both replica ids: the server learns which
// member is speaking, and every frame on the stream must speak only for
// that member (frame.speaksFor). A server accepts only current members;
// it then reads frames [uint32 size][payload], each at most MaxFrameBytes,
// allocating as the bytes arrive, under idle and per-frame deadlines.

// streamProtocolVersion is advertised in node metadata ("sv") and opens
// both greetings; a peer with another version is reached over memberlist.
const streamProtocolVersion = 1

const (
	challengeSize = 32
	exporterLabel = "EXPORTER-kvrouter-stream-hello"
	// maxPendingHandshakes bounds connections that have not proven
	// membership yet, so strangers cannot take every inbound slot.
	maxPendingHandshakes = 16
	// frameChunk is the first allocation for a frame's payload; a buffer
	// then at most doubles what has arrived.
	frameChunk = 64 << 10
	// reuseFrameBuf: a stream keeps its frame buffer up to this capacity.
	reuseFrameBuf = 1 << 20
	// redialBackoffMax bounds the wait between refused or failed dials.
	redialBackoffMax = 5 * time.Second
)

const (
	ackOK      byte = 0
	ackRefused byte = 1
)

var (
	serverMagic = []byte("KVRS")
	helloMagic  = []byte("KVRH")
)

// streams is the listening side and the connections it accepted.
type streams struct {
	ln        net.Listener
	serverTLS *tls.Config // nil: plaintext
	clientTLS *tls.Config

	mu          sync.Mutex
	conns       map[net.Conn]struct{} // every inbound connection
	byMember    map[string]net.Conn   // authenticated inbound stream per member
	handshaking int
	closed      bool
	lastWarn    atomic.Int64 // unix nanos of the last refusal logged at Warn
}

// listenStreams binds the stream listener next to memberlist's address.
func listenStreams(bindAddr string, trust *streamTrust) (*streams, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(bindAddr, "0"))
	if err != nil {
		return nil, fmt.Errorf("cluster: stream listener on %s: %w", bindAddr, err)
	}
	return &streams{
		ln: ln, serverTLS: trust.serverConfig(), clientTLS: trust.clientConfig(),
		conns: map[net.Conn]struct{}{}, byMember: map[string]net.Conn{},
	}, nil
}

func (s *streams) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// admit registers a new inbound connection unless the caps are reached.
func (s *streams) admit(conn net.Conn, maxConns int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.conns) >= maxConns || s.handshaking >= maxPendingHandshakes {
		return false
	}
	s.conns[conn] = struct{}{}
	s.handshaking++
	return true
}

// authenticated ends conn's handshake; with a member it becomes that
// member's stream, replacing (closing) an older one.
func (s *streams) authenticated(conn net.Conn, member string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handshaking--
	if member == "" || s.closed {
		return false
	}
	if old := s.byMember[member]; old != nil && old != conn {
		old.Close()
	}
	s.byMember[member] = conn
	return true
}

func (s *streams) release(conn net.Conn, member string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, conn)
	if member != "" && s.byMember[member] == conn {
		delete(s.byMember, member)
	}
}

// dropMember closes a departed member's inbound stream.
func (s *streams) dropMember(member string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.byMember[member]; c != nil {
		c.Close()
		delete(s.byMember, member)
	}
}

// acceptStreams serves every peer's stream on a goroutine of its own,
// which authenticates it and then hands each frame to the receiver
// (memberlist's paths go through NotifyMsg and the inbox instead).
func (n *Node) acceptStreams() {
	defer n.wg.Done()
	for {
		conn, err := n.streams.ln.Accept()
		if err != nil {
			return // listener closed by Shutdown
		}
		if !n.streams.admit(conn, n.cfg.MaxInboundStreams) {
			n.stats.streamsOverLimit.Add(1)
			conn.Close()
			continue
		}
		n.wg.Add(1)
		go n.serveStream(conn)
	}
}

func (n *Node) serveStream(conn net.Conn) {
	defer n.wg.Done()
	from, epoch, br, err := n.acceptHandshake(conn)
	authenticated := n.streams.authenticated(conn, from)
	defer func() {
		n.streams.release(conn, from)
		conn.Close()
	}()
	if err != nil {
		n.stats.streamsRefused.Add(1)
		n.refusalLog("stream refused", "remote", conn.RemoteAddr().String(), "err", err)
		return
	}
	if !authenticated {
		return // shutting down
	}
	n.stats.streamsAccepted.Add(1)
	n.readStream(conn, br, from, epoch)
}

// refusalLog logs at Warn at most once a minute (a stranger knocking must
// not flood the log), at Debug otherwise.
func (n *Node) refusalLog(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := n.streams.lastWarn.Load()
	if now-last > int64(time.Minute) && n.streams.lastWarn.CompareAndSwap(last, now) {
		n.log.Warn(msg+" (further refusals within a minute are logged at debug)", args...)
		return
	}
	n.log.Debug(msg, args...)
}

// errRefused is a handshake the server completed but refused.
var errRefused = errors.New("stream refused")

// acceptHandshake runs the server side of the handshake on a fresh
// connection. It returns the member speaking and the epoch it was
// accepted in, or an error (the connection is then closed).
func (n *Node) acceptHandshake(raw net.Conn) (from string, epoch uint64, br *bufio.Reader, err error) {
	// TLS, greeting and hello within TCPTimeout; then at most helloWait
	// for memberlist to announce the member, then TCPTimeout for the ack.
	if err := raw.SetDeadline(time.Now().Add(n.cfg.TCPTimeout)); err != nil {
		return "", 0, nil, err
	}
	conn := raw
	var exporter []byte
	if cfg := n.streams.serverTLS; cfg != nil {
		tc := tls.Server(raw, cfg)
		if err := tc.Handshake(); err != nil {
			return "", 0, nil, fmt.Errorf("tls: %w", err)
		}
		if exporter, err = tlsExporter(tc); err != nil {
			return "", 0, nil, err
		}
		conn = tc
	}
	greeting := make([]byte, 0, len(serverMagic)+1+challengeSize)
	greeting = append(append(greeting, serverMagic...), streamProtocolVersion)
	challenge := make([]byte, challengeSize)
	_, _ = rand.Read(challenge) // crypto/rand.Read never fails on supported platforms
	if _, err := conn.Write(append(greeting, challenge...)); err != nil {
		return "", 0, nil, err
	}
	// The hello is small; the frame reader's large buffer is allocated
	// only for a member.
	hr := bufio.NewReaderSize(conn, 512)
	h, err := readHello(hr)
	if err != nil {
		return "", 0, nil, err
	}
	answer := func(ack byte) error {
		if err := raw.SetDeadline(time.Now().Add(n.cfg.TCPTimeout)); err != nil {
			return err
		}
		_, err := conn.Write([]byte{ack})
		return err
	}
	refuse := func(err error) (string, uint64, *bufio.Reader, error) {
		_ = answer(ackRefused) // best effort: the close says it too
		return "", 0, nil, fmt.Errorf("%w: %q: %w", errRefused, h.from, err)
	}
	switch {
	case h.label != n.cfg.Label:
		return refuse(fmt.Errorf("label %q, ours is %q", h.label, n.cfg.Label))
	case h.to != n.cfg.ReplicaID:
		return refuse(fmt.Errorf("addressed to %q", h.to))
	case h.from == n.cfg.ReplicaID:
		return refuse(errors.New("claims to be this replica"))
	}
	// A replica that just joined may dial before memberlist told us about
	// it: wait for that, TCPTimeout at most (only key holders get here).
	key, epoch, ok := n.memberStreamKey(h.from)
	for wait := time.Now().Add(n.cfg.TCPTimeout); !ok && time.Now().Before(wait); {
		select {
		case <-n.stop:
			return refuse(ErrClosed)
		case <-time.After(25 * time.Millisecond):
		}
		key, epoch, ok = n.memberStreamKey(h.from)
	}
	if !ok {
		return refuse(errors.New("not a current member"))
	}
	if !ed25519.Verify(key, helloSigMessage(challenge, exporter, h), h.sig) {
		return refuse(errors.New("hello signature does not verify with the member's key"))
	}
	if hr.Buffered() != 0 {
		return refuse(errors.New("frames before the ack"))
	}
	if err := answer(ackOK); err != nil {
		return "", 0, nil, err
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return "", 0, nil, err
	}
	return h.from, epoch, bufio.NewReaderSize(conn, 64<<10), nil
}

// tlsExporter binds the hello to this TLS session (RFC 5705): a hello
// cannot be replayed on another connection.
func tlsExporter(tc *tls.Conn) ([]byte, error) {
	cs := tc.ConnectionState()
	b, err := cs.ExportKeyingMaterial(exporterLabel, nil, challengeSize)
	if err != nil {
		return nil, fmt.Errorf("tls exporter: %w", err)
	}
	return b, nil
}

// hello is the client's half of the handshake.
type hello struct {
	label, from, to string
	sig             []byte
}

func helloSigMessage(challenge, exporter []byte, h hello) []byte {
	b := make([]byte, 0, 128)
	b = append(b, helloSigDomain...)
	b = append(b, challenge...)
	b = append(b, exporter...)
	b = appendString(b, h.label)
	b = appendString(b, h.from)
	return appendString(b, h.to)
}

func encodeHello(h hello) []byte {
	b := append(slices.Clone(helloMagic), streamProtocolVersion)
	b = appendString(b, h.label)
	b = appendString(b, h.from)
	b = appendString(b, h.to)
	return append(b, h.sig...)
}

// readHello reads a hello from a stream, never more than its bounded
// size.
func readHello(r *bufio.Reader) (hello, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return hello{}, fmt.Errorf("hello: %w", err)
	}
	if !bytes.Equal(head[:4], helloMagic) || head[4] != streamProtocolVersion {
		return hello{}, fmt.Errorf("%w: hello: bad magic or version %x", ErrMalformed, head)
	}
	var h hello
	var err error
	if h.label, err = readBoundedString(r); err != nil {
		return hello{}, err
	}
	if h.from, err = readBoundedString(r); err != nil {
		return hello{}, err
	}
	if h.to, err = readBoundedString(r); err != nil {
		return hello{}, err
	}
	h.sig = make([]byte, ed25519.SignatureSize)
	if _, err := io.ReadFull(r, h.sig); err != nil {
		return hello{}, fmt.Errorf("hello signature: %w", err)
	}
	return h, nil
}

func readBoundedString(r *bufio.Reader) (string, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return "", fmt.Errorf("%w: hello: %w", ErrMalformed, err)
	}
	if n > maxNameLen {
		return "", fmt.Errorf("%w: hello: string of %d bytes", ErrMalformed, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("hello: %w", err)
	}
	return string(b), nil
}

// readStream hands each frame of an authenticated stream to the
// receiver, on this goroutine: a goroutine switch per batch was a
// measurable share of what a peer pays. A slow apply pushes back on this
// peer's stream (TCP), and its sender's bounded queue drops and counts.
func (n *Node) readStream(conn net.Conn, br *bufio.Reader, from string, epoch uint64) {
	fr := frameReader{r: br, max: n.cfg.MaxFrameBytes}
	frameStarted := func() {
		_ = conn.SetReadDeadline(time.Now().Add(n.cfg.StreamFrameTimeout)) // fails only once closed; the read reports it
	}
	for {
		_ = conn.SetReadDeadline(time.Now().Add(n.cfg.StreamIdleTimeout))
		buf, err := fr.next(frameStarted)
		if err != nil {
			var ne net.Error
			switch {
			case errors.Is(err, errFrameSize):
				n.stats.oversizedFrames.Add(1)
				n.stats.malformed.Add(1)
				n.log.Warn("stream closed: frame size out of bounds", "peer", from, "err", err)
			case errors.As(err, &ne) && ne.Timeout():
				n.stats.streamTimeouts.Add(1)
				n.log.Debug("stream closed: read deadline", "peer", from)
			}
			return
		}
		if !n.memberCurrent(from, epoch) {
			return // departed (memberDown also closes the connection)
		}
		n.stats.messagesReceived.Add(1)
		n.recv.receive(buf, from)
	}
}

var errFrameSize = errors.New("frame size out of bounds")

// frameReader reads [uint32 size][payload] frames. A size above max is
// refused before anything is allocated, and the payload's buffer grows
// only as bytes arrive (at most doubling what has arrived), so a header
// alone costs nothing and a slow frame costs about what it sent.
type frameReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// next returns the next frame's payload, valid until the next call.
// started, if set, is called once a header is read.
func (fr *frameReader) next(started func()) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		return nil, err
	}
	size := uint64(binary.BigEndian.Uint32(hdr[:]))
	if size == 0 || size > uint64(fr.max) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", errFrameSize, size, fr.max)
	}
	if started != nil {
		started()
	}
	want := int(size)
	buf := fr.buf[:0]
	for len(buf) < want {
		if len(buf) == cap(buf) {
			// Wait for bytes before making room for them.
			if _, err := fr.r.Peek(1); err != nil {
				return nil, noEOF(err)
			}
			buf = slices.Grow(buf, min(want-len(buf), max(len(buf), frameChunk)))
		}
		k, err := io.ReadFull(fr.r, buf[len(buf):min(want, cap(buf))])
		buf = buf[:len(buf)+k]
		if err != nil {
			return nil, noEOF(err)
		}
	}
	if cap(buf) <= reuseFrameBuf {
		fr.buf = buf[:0]
	} else {
		fr.buf = nil
	}
	return buf, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// closeStreams stops accepting and closes every accepted connection.
func (n *Node) closeStreams() {
	if n.streams == nil {
		return
	}
	n.streams.ln.Close()
	n.streams.mu.Lock()
	n.streams.closed = true
	for c := range n.streams.conns {
		c.Close()
	}
	n.streams.mu.Unlock()
}

var errNoStream = errors.New("peer advertises no stream")

// sendStream writes buf as one frame on the peer's stream, dialing it if
// needed. Only the peer's sender goroutine calls it.
func (n *Node) sendStream(p *peerSender, buf []byte) error {
	node := p.node.Load()
	port := p.streamPort.Load()
	if node == nil || port == 0 {
		return errNoStream
	}
	if p.conn == nil {
		now := time.Now()
		if now.Before(p.redialAt) {
			return errNoStream // backing off: memberlist's paths meanwhile
		}
		addr := net.JoinHostPort(node.Addr.String(), strconv.Itoa(int(port)))
		conn, err := n.dialStream(addr, p.name)
		if err != nil {
			p.backoff = min(max(2*p.backoff, 100*time.Millisecond), redialBackoffMax)
			p.redialAt = now.Add(p.backoff)
			return fmt.Errorf("dial stream %s: %w", addr, err)
		}
		p.conn, p.backoff = conn, 0
	}
	frame := make([]byte, 4+len(buf))
	binary.BigEndian.PutUint32(frame, uint32(len(buf)))
	copy(frame[4:], buf)
	// Fails only on a closed connection, which the Write below reports.
	_ = p.conn.SetWriteDeadline(time.Now().Add(n.cfg.TCPTimeout))
	if _, err := p.conn.Write(frame); err != nil {
		p.conn.Close()
		p.conn = nil
		return fmt.Errorf("write stream: %w", err)
	}
	return nil
}

// dialStream opens and authenticates a stream to peer at addr.
func (n *Node) dialStream(addr, peer string) (net.Conn, error) {
	raw, err := net.DialTimeout("tcp", addr, n.cfg.TCPTimeout)
	if err != nil {
		return nil, err
	}
	conn, err := clientHandshake(raw, n.streams.clientTLS, n.signKey, hello{label: n.cfg.Label, from: n.cfg.ReplicaID, to: peer},
		time.Now().Add(3*n.cfg.TCPTimeout))
	if err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// clientHandshake runs the client side of the handshake on raw; h.sig is
// filled in. The returned connection has no deadline.
func clientHandshake(raw net.Conn, cfg *tls.Config, key ed25519.PrivateKey, h hello, deadline time.Time) (net.Conn, error) {
	if err := raw.SetDeadline(deadline); err != nil {
		return nil, err
	}
	conn := raw
	var exporter []byte
	if cfg != nil {
		tc := tls.Client(raw, cfg)
		if err := tc.Handshake(); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		var err error
		if exporter, err = tlsExporter(tc); err != nil {
			return nil, err
		}
		conn = tc
	}
	greeting := make([]byte, len(serverMagic)+1+challengeSize)
	if _, err := io.ReadFull(conn, greeting); err != nil {
		return nil, fmt.Errorf("greeting: %w", err)
	}
	if !bytes.Equal(greeting[:4], serverMagic) || greeting[4] != streamProtocolVersion {
		return nil, fmt.Errorf("%w: greeting %x", ErrMalformed, greeting[:5])
	}
	h.sig = ed25519.Sign(key, helloSigMessage(greeting[5:], exporter, h))
	if _, err := conn.Write(encodeHello(h)); err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		return nil, fmt.Errorf("%w (no ack: %w)", errRefused, err)
	}
	if ack[0] != ackOK {
		return nil, errRefused
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return conn, nil
}
