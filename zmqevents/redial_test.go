package zmqevents_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// nullSecurity is ZMTP's NULL mechanism for the fake publisher's side of
// the handshake.
type nullSecurity struct{}

func (nullSecurity) Type() zmq4.SecurityType { return zmq4.NullSecurity }
func (nullSecurity) Handshake(conn *zmq4.Conn, _ bool) error {
	raw, err := conn.Meta.MarshalZMTP()
	if err != nil {
		return err
	}
	if err := conn.SendCmd(zmq4.CmdReady, raw); err != nil {
		return err
	}
	cmd, err := conn.RecvCmd()
	if err != nil {
		return err
	}
	if cmd.Name != zmq4.CmdReady {
		return errors.New("no READY")
	}
	return conn.Peer.Meta.UnmarshalZMTP(cmd.Body)
}
func (nullSecurity) Encrypt(w io.Writer, b []byte) (int, error) {
	return w.Write(b)
}
func (nullSecurity) Decrypt(w io.Writer, b []byte) (int, error) {
	return w.Write(b)
}

// dropper is a loopback TCP listener that accepts every connection and
// closes it: at once (handshake false), or after completing a ZMTP
// handshake as a PUB socket (handshake true), which is the connection a
// rank counts as established and then loses.
type dropper struct {
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func startDropper(t *testing.T, handshake bool) *dropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dropper{ln: ln}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.conns.Add(1)
			if handshake {
				_ = c.SetDeadline(time.Now().Add(time.Second))
				if zc, err := zmq4.Open(c, nullSecurity{}, zmq4.Pub, zmq4.SocketIdentity("pub"), true, nil); err == nil {
					_ = zc.Close()
				}
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		d.wg.Wait()
	})
	return d
}

// TestRedialIsPaced: a publisher that accepts and drops every connection
// is redialled on the rank's backoff, not in a loop. With a 20 ms first
// wait doubling from there, one second holds well under 15 attempts
// (about 7); an unpaced redial makes thousands. A publisher that drops the
// connection before the handshake is still redialled (the rank does not
// give up).
func TestRedialIsPaced(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handshake bool
	}{{"closed before handshake", false}, {"closed after handshake", true}} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDropper(t, tc.handshake)
			sub, err := zmqevents.StartSubscriber(context.Background(), zmqevents.WorkerEndpoint{
				WorkerID: kv.WorkerID(1), Endpoint: "tcp://" + d.ln.Addr().String(),
			}, zmqevents.Options{BlockSize: 16, Handler: func(*kv.Event) {}, RetryInterval: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			_ = sub.Close()
			n := d.conns.Load()
			t.Logf("%d connections in 1 s", n)
			if n > 15 {
				t.Errorf("%d connections in 1 s: redials are not backed off", n)
			}
			if n < 3 {
				t.Errorf("%d connections in 1 s: the rank stopped redialling", n)
			}
		})
	}
}

// TestSilentPublisherDoesNotHoldTheRank: a publisher that accepts and
// never answers the ZMTP greeting fails the handshake at its timeout and
// is redialled on the backoff; closing the subscriber returns at once
// instead of waiting for a greeting that never comes.
func TestSilentPublisherDoesNotHoldTheRank(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never written to, never closed until the end
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	var failed atomic.Int64
	sub, err := zmqevents.StartSubscriber(context.Background(), zmqevents.WorkerEndpoint{
		WorkerID: kv.WorkerID(1), Endpoint: "tcp://" + ln.Addr().String(),
	}, zmqevents.Options{BlockSize: 16, Handler: func(*kv.Event) {}, RetryInterval: 20 * time.Millisecond,
		HandshakeTimeout: 100 * time.Millisecond,
		OnReconnect: func(reason string) {
			if reason == "handshake_failed" {
				failed.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	closed := make(chan struct{})
	go func() { _ = sub.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close still waiting 2 s later: the rank is stuck in a handshake")
	}
	if n := failed.Load(); n < 2 {
		t.Errorf("%d handshake failures in 700 ms with a 100 ms handshake timeout, want >= 2", n)
	}
	if st := sub.Stats(); st.Reconnects[zmqevents.ReconnectHandshakeFailed] != uint64(failed.Load()) {
		t.Errorf("stats %v, callback %d", st.Reconnects, failed.Load())
	}
}
