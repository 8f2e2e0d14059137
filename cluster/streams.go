package cluster

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Gossip batches go over one persistent TCP connection per peer when the
// peer advertises a stream port (node metadata "sp"). memberlist's own
// reliable path dials a fresh TCP connection for every message, and its
// UDP path loses and reorders; a persistent stream costs one write per
// batch and keeps a peer's batches in order. Without a stream (an old
// peer, or the connection failing) sends fall back to memberlist.

// maxStreamFrame bounds one frame on a stream (a full state of a busy
// replica is the largest message).
const maxStreamFrame = 64 << 20

// streams is the listening side and the connections it accepted.
type streams struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// listenStreams binds the stream listener next to memberlist's address.
func listenStreams(bindAddr string) (*streams, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(bindAddr, "0"))
	if err != nil {
		return nil, fmt.Errorf("cluster: stream listener on %s: %w", bindAddr, err)
	}
	return &streams{ln: ln, conns: map[net.Conn]struct{}{}}, nil
}

func (s *streams) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// acceptStreams serves every peer's stream on a reader goroutine of its
// own, which hands each frame to the receiver (memberlist's paths go
// through NotifyMsg and the inbox instead).
func (n *Node) acceptStreams() {
	defer n.wg.Done()
	for {
		conn, err := n.streams.ln.Accept()
		if err != nil {
			return // listener closed by Shutdown
		}
		n.streams.mu.Lock()
		n.streams.conns[conn] = struct{}{}
		n.streams.mu.Unlock()
		n.wg.Add(1)
		go n.readStream(conn)
	}
}

func (n *Node) readStream(conn net.Conn) {
	defer n.wg.Done()
	defer func() {
		n.streams.mu.Lock()
		delete(n.streams.conns, conn)
		n.streams.mu.Unlock()
		conn.Close()
	}()
	r := bufio.NewReaderSize(conn, 64<<10)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		size := binary.BigEndian.Uint32(hdr[:])
		if size == 0 || size > maxStreamFrame {
			n.stats.malformed.Add(1)
			return
		}
		buf := make([]byte, size)
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		n.stats.messagesReceived.Add(1)
		// Handled here, not handed to the apply goroutine: a goroutine
		// switch per batch was a measurable share of what a peer pays.
		// A slow apply now pushes back on this peer's stream (TCP), and
		// its sender's bounded queue drops and counts, as before.
		n.recv.receive(buf)
	}
}

// closeStreams stops accepting and closes every accepted connection.
func (n *Node) closeStreams() {
	if n.streams == nil {
		return
	}
	n.streams.ln.Close()
	n.streams.mu.Lock()
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
		addr := net.JoinHostPort(node.Addr.String(), strconv.Itoa(int(port)))
		conn, err := net.DialTimeout("tcp", addr, n.cfg.TCPTimeout)
		if err != nil {
			return fmt.Errorf("dial stream %s: %w", addr, err)
		}
		p.conn = conn
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
