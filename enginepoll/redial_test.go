package enginepoll

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// TestPollBacksOffFromDroppingEngine: an engine address that accepts and
// closes every connection is polled on the failure backoff (doubling from
// the 20 ms interval to 320 ms, jittered), not every interval: about 7
// polls in a second, each one connection per request. Polled every
// interval it would take ~50 polls. Over a real loopback socket.
func TestPollBacksOffFromDroppingEngine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			_ = c.Close()
		}
	}()
	rec := &recorder{last: map[kv.WorkerID]Verdict{}}
	o := fastOptions(rec)
	o.MaxBackoff = 320 * time.Millisecond
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	p.Set([]Target{{ID: 1, URL: "http://" + ln.Addr().String()}})
	time.Sleep(time.Second)
	p.Close()
	_ = ln.Close()
	n := conns.Load()
	t.Logf("%d connections in 1 s", n)
	// Each poll may open a connection for /health and, on a transport
	// retry of a dropped idempotent request, one more.
	if n > 30 {
		t.Errorf("%d connections in 1 s: failing polls are not backed off", n)
	}
	if n < 3 {
		t.Errorf("%d connections in 1 s: the engine stopped being polled", n)
	}
}
