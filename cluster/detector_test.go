package cluster

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/memberlist"

	"github.com/kvrouter/kvrouter/internal/testutil"
)

// cuttableTransport is memberlist's real UDP/TCP transport with a switch
// that cuts the node off the network while the process keeps running: its
// packets and streams, in and out, are lost, as behind a partition.
type cuttableTransport struct {
	memberlist.NodeAwareTransport
	cut      atomic.Bool
	packets  chan *memberlist.Packet
	streams  chan net.Conn
	done     chan struct{}
	shutdown sync.Once
}

var errCut = errors.New("partitioned")

func newCuttableTransport(inner memberlist.NodeAwareTransport) *cuttableTransport {
	t := &cuttableTransport{NodeAwareTransport: inner,
		packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), done: make(chan struct{})}
	go func() {
		for {
			select {
			case p := <-inner.PacketCh():
				if t.cut.Load() {
					continue
				}
				select {
				case t.packets <- p:
				case <-t.done:
					return
				}
			case <-t.done:
				return
			}
		}
	}()
	go func() {
		for {
			select {
			case c := <-inner.StreamCh():
				if t.cut.Load() {
					c.Close()
					continue
				}
				select {
				case t.streams <- c:
				case <-t.done:
					c.Close()
					return
				}
			case <-t.done:
				return
			}
		}
	}()
	return t
}

func (t *cuttableTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *cuttableTransport) StreamCh() <-chan net.Conn           { return t.streams }

func (t *cuttableTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.cut.Load() {
		return time.Now(), nil // sent into the void
	}
	return t.NodeAwareTransport.WriteTo(b, addr)
}

func (t *cuttableTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	if t.cut.Load() {
		return time.Now(), nil
	}
	return t.NodeAwareTransport.WriteToAddress(b, addr)
}

func (t *cuttableTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.cut.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errCut}
	}
	return t.NodeAwareTransport.DialTimeout(addr, timeout)
}

func (t *cuttableTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.cut.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errCut}
	}
	return t.NodeAwareTransport.DialAddressTimeout(addr, timeout)
}

func (t *cuttableTransport) Shutdown() error {
	t.shutdown.Do(func() { close(t.done) })
	return t.NodeAwareTransport.Shutdown()
}

// TestPartitionCountsSuspicionsAndFalseDeaths cuts a live replica off the
// network of a real 3-node loopback cluster for longer than the failure
// detection bound, then heals it: its peers suspect it and declare it
// dead, and when it comes back with the same boot key (it never stopped)
// they count a false death while it counts the refutation.
func TestPartitionCountsSuspicionsAndFalseDeaths(t *testing.T) {
	var gate *cuttableTransport
	rs := startCluster(t, 3, func(c *Config) {
		if c.ReplicaID == "r2" {
			c.wrapTransport = func(inner memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
				gate = newCuttableTransport(inner)
				return gate
			}
		}
	})
	before := make([]Stats, len(rs))
	for i, r := range rs {
		before[i] = r.node.Stats()
	}
	gate.cut.Store(true)
	bound := rs[0].node.cfg.FailureDetectionBound(3) + time.Second
	for _, r := range rs[:2] {
		testutil.Eventually(t, bound, "r2 dead at "+r.node.ID(), func() bool { return !memberByID(r.node.Members(), "r2").Alive })
	}
	for i, r := range rs[:2] {
		st := r.node.Stats()
		if st.Suspicions <= before[i].Suspicions || st.Deaths <= before[i].Deaths {
			t.Fatalf("%s: suspicions %d -> %d, deaths %d -> %d: the cut was not counted",
				r.node.ID(), before[i].Suspicions, st.Suspicions, before[i].Deaths, st.Deaths)
		}
		if st.FalseDeaths != before[i].FalseDeaths {
			t.Fatalf("%s counted a false death before r2 came back", r.node.ID())
		}
	}

	gate.cut.Store(false)
	for i, r := range rs[:2] {
		testutil.Eventually(t, 10*time.Second, "r2 back at "+r.node.ID(), func() bool {
			return memberByID(r.node.Members(), "r2").Alive && r.node.Stats().FalseDeaths > before[i].FalseDeaths
		})
	}
	testutil.Eventually(t, 5*time.Second, "r2 refuted its death", func() bool {
		return rs[2].node.Stats().Refutations > before[2].Refutations
	})
	for i, r := range rs {
		st := r.node.Stats()
		t.Logf("%s: suspicions %d, refutations %d, deaths %d, false deaths %d, degraded probes %d, health %d",
			r.node.ID(), st.Suspicions-before[i].Suspicions, st.Refutations-before[i].Refutations,
			st.Deaths-before[i].Deaths, st.FalseDeaths-before[i].FalseDeaths, st.DegradedProbes-before[i].DegradedProbes, st.HealthScore)
	}
}

// TestCrashIsNotAFalseDeath: a replica that crashes and never comes back
// is a death, not a false one, and a replica restarted under the same name
// (new boot key) is not the same process coming back.
func TestCrashIsNotAFalseDeath(t *testing.T) {
	rs := startCluster(t, 2, nil)
	a, b := rs[0], rs[1]
	port := b.node.LocalAddr()
	b.node.Shutdown() // no Leave: a crash
	bound := a.node.cfg.FailureDetectionBound(2) + time.Second
	testutil.Eventually(t, bound, "b dead", func() bool { return !memberByID(a.node.Members(), "r1").Alive })
	_, p, err := net.SplitHostPort(port)
	if err != nil {
		t.Fatal(err)
	}
	bindPort, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	startReplica(t, "r1", []string{a.node.LocalAddr()}, func(c *Config) { c.BindPort = bindPort })
	testutil.Eventually(t, 10*time.Second, "r1 restarted and back", func() bool { return memberByID(a.node.Members(), "r1").Alive })
	if st := a.node.Stats(); st.Deaths < 1 || st.FalseDeaths != 0 {
		t.Fatalf("a: deaths %d, false deaths %d; want the crash counted, not as false", st.Deaths, st.FalseDeaths)
	}
}

// TestDetectorSinkRoutesByNode: memberlist's metrics reach the Node whose
// label they carry and no other, and unknown or unlabelled ones are
// ignored.
func TestDetectorSinkRoutesByNode(t *testing.T) {
	var c1, c2 counters
	l1, un1 := registerDetector(&c1)
	l2, un2 := registerDetector(&c2)
	defer un2()
	metrics.IncrCounterWithLabels([]string{"memberlist", "msg", "suspect"}, 1, l1)
	metrics.IncrCounterWithLabels([]string{"memberlist", "msg", "dead"}, 1, l2)
	metrics.IncrCounterWithLabels([]string{"memberlist", "degraded", "probe"}, 1, l2)
	metrics.IncrCounterWithLabels([]string{"memberlist", "udp", "sent"}, 100, l1)
	metrics.IncrCounterWithLabels([]string{"memberlist", "msg", "suspect"}, 1, nil)
	metrics.SetGaugeWithLabels([]string{"memberlist", "health", "score"}, 3, l2)
	un1()
	metrics.IncrCounterWithLabels([]string{"memberlist", "msg", "suspect"}, 1, l1) // after unregistering
	if got := c1.snapshot(); got.Suspicions != 1 || got.Deaths != 0 || got.DegradedProbes != 0 {
		t.Fatalf("node 1: %+v", got)
	}
	if got := c2.snapshot(); got.Suspicions != 0 || got.Deaths != 1 || got.DegradedProbes != 1 || got.HealthScore != 3 {
		t.Fatalf("node 2: %+v", got)
	}
}

func TestRefutationLinesCounted(t *testing.T) {
	var c counters
	l := newMemberlistLogger(quietLogger, &c)
	l.Printf("[WARN] memberlist: Refuting a suspect message (from: r1)")
	l.Printf("[WARN] memberlist: Refuting a dead message (from: r1)")
	l.Printf("[WARN] memberlist: Refuting an alive message for 'r0' (127.0.0.1:1) meta:([] VS []), vsn:([] VS [])")
	l.Printf("[INFO] memberlist: Suspect r1 has failed, no acks received")
	if got := c.refutations.Load(); got != 3 {
		t.Fatalf("refutations = %d, want 3", got)
	}
}

// Lines about single inbound messages (anyone who reaches the port can
// cause one per packet) are counted, and logged at most once per interval
// with how many were suppressed; other errors are logged every time.
func TestRejectedMessageLinesCountedAndLimited(t *testing.T) {
	var c counters
	var buf bytes.Buffer
	l := newMemberlistLogger(slog.New(slog.NewTextHandler(&buf, nil)), &c)
	for range 100 {
		l.Printf("[ERR] memberlist: Decrypt packet failed: no installed keys could decrypt the message from=203.0.113.9:7946")
		l.Printf("[WARN] memberlist: Got ping for unexpected node 'x' from=203.0.113.9:7946")
	}
	l.Printf("[ERR] memberlist: Failed to encode ack: boom")
	l.Printf("[ERR] memberlist: Failed to encode ack: boom")
	if got := c.snapshot().RejectedMessages; got != 200 {
		t.Fatalf("rejected messages = %d, want 200", got)
	}
	out := buf.String()
	if n := strings.Count(out, "from=203.0.113.9"); n != 1 {
		t.Fatalf("%d lines about rejected messages logged, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "Failed to encode ack"); n != 2 {
		t.Fatalf("other errors logged %d times, want 2:\n%s", n, out)
	}
}
