package cluster

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
)

// TestRejoinFindsLateSeed starts a replica whose only seed is not up yet:
// Start succeeds alone, and the background rejoin joins the seed once a
// replica listens there.
func TestRejoinFindsLateSeed(t *testing.T) {
	probe := startReplica(t, "probe", nil, nil)
	addr := probe.node.LocalAddr()
	probe.node.Shutdown() // frees a known port that now answers nobody

	waiting := startReplica(t, "waiting", []string{addr}, func(c *Config) { c.RejoinInterval = 50 * time.Millisecond })
	if got := waiting.node.Stats().Members; got != 1 || !waiting.node.needsRejoin() {
		t.Fatalf("members = %d, needsRejoin = %v; want alone and retrying", got, waiting.node.needsRejoin())
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	startReplica(t, "seed", nil, func(c *Config) { c.BindPort = p })
	d := testutil.Eventually(t, 3*time.Second, "rejoin", func() bool { return waiting.node.Stats().Members == 2 })
	t.Logf("rejoined %v after the seed came up", d)
	if waiting.node.needsRejoin() {
		t.Fatal("seed is a member, yet rejoin still wanted")
	}
}

func TestStartFailsWithoutRejoin(t *testing.T) {
	// A seed that accepts connections but never speaks memberlist; holding
	// its port also keeps the new node from binding it and "joining"
	// itself.
	seed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	addr := seed.Addr().String()
	cfg := testConfig("lonely")
	cfg.Join = []string{addr}
	cfg.RejoinInterval = 0
	cfg.TCPTimeout = 200 * time.Millisecond
	if n, err := Start(t.Context(), cfg, newHolder("lonely")); err == nil {
		n.Shutdown()
		t.Fatal("Start succeeded with an unreachable seed and no rejoin")
	}
}
