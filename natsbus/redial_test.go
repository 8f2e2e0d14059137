package natsbus

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/redial"
)

// TestReconnectBackoff: after the server goes away and something that
// accepts and drops connections takes its port, the client redials on
// the growing backoff (a handful of connections in a second with a 20 ms
// first wait, not one per 20 ms), and the reasons and the current wait
// are reported.
func TestReconnectBackoff(t *testing.T) {
	defer func(p redial.Policy) { Redial = p }(Redial)
	Redial = redial.Policy{Base: 20 * time.Millisecond, Max: time.Second, StableAfter: time.Second}
	e, err := StartEmbedded(EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(e.ClientURL(), "nats://")
	var mu sync.Mutex
	reasons := map[string]int{}
	waits := &redial.Waits{}
	nc, err := Connect(context.Background(), e.ClientURL(), "test", slog.New(slog.DiscardHandler),
		ObserveReconnects(func(r string) { mu.Lock(); reasons[r]++; mu.Unlock() }, waits))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	e.Shutdown()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the server's port was taken before the test could listen on it: %v", err)
	}
	var conns atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			_ = c.Close()
		}
	}()
	time.Sleep(time.Second)
	longest := waits.Max()
	_ = ln.Close()
	<-done
	n := conns.Load()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d connections in 1 s, reasons %v, current wait %v", n, reasons, longest)
	if n > 15 {
		t.Errorf("%d connections in 1 s: reconnects are not backed off", n)
	}
	if reasons["connection_lost"] != 1 || reasons["dial_failed"] < 2 {
		t.Errorf("reasons %v: want one connection_lost and a dial_failed per failed pass", reasons)
	}
	if longest < Redial.Base {
		t.Errorf("current wait %v did not grow past the first %v", longest, Redial.Base)
	}
}
