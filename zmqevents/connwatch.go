package zmqevents

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/go-zeromq/zmq4"
)

// connWatch is ZMTP's NULL security mechanism (no authentication, no
// encryption: what vLLM's publisher speaks) that also counts completed
// handshakes. zmq4 reconnects a SUB socket by itself and says nothing,
// and a reconnect is when a restarted engine can slip past the sequence
// checks: if its new numbering has reached exactly the old next number,
// the first batch heard from it looks like the next batch of the old
// process. Counting handshakes lets the stream verify that batch.
type connWatch struct {
	handshakes atomic.Uint64  // this socket's
	total      *atomic.Uint64 // the subscriber's, for Stats
}

func (*connWatch) Type() zmq4.SecurityType { return zmq4.NullSecurity }

// Handshake exchanges READY commands carrying the socket metadata, as the
// NULL mechanism does (ZMTP 3.0, rfc.zeromq.org/spec:23).
func (w *connWatch) Handshake(conn *zmq4.Conn, _ bool) error {
	raw, err := conn.Meta.MarshalZMTP()
	if err != nil {
		return fmt.Errorf("marshal socket metadata: %w", err)
	}
	if err := conn.SendCmd(zmq4.CmdReady, raw); err != nil {
		return fmt.Errorf("send READY: %w", err)
	}
	cmd, err := conn.RecvCmd()
	if err != nil {
		return fmt.Errorf("receive READY: %w", err)
	}
	if cmd.Name != zmq4.CmdReady {
		return errors.Join(zmq4.ErrBadCmd, fmt.Errorf("peer sent %q before READY", cmd.Name))
	}
	if err := conn.Peer.Meta.UnmarshalZMTP(cmd.Body); err != nil {
		return fmt.Errorf("peer metadata: %w", err)
	}
	w.handshakes.Add(1)
	w.total.Add(1)
	return nil
}

func (*connWatch) Encrypt(w io.Writer, data []byte) (int, error) { return w.Write(data) }

func (*connWatch) Decrypt(w io.Writer, data []byte) (int, error) { return w.Write(data) }
