package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
)

// TestSentHandsTheOpenBatchToEveryPeer: with a batch interval far longer
// than the calls may wait, Sent has the open batch sent at once, returns
// once both peers' senders wrote it, and the peers apply the event; a
// second call right after the first batch gets its own batch a moment
// later (ackGap), not at the end of the batch interval.
func TestSentHandsTheOpenBatchToEveryPeer(t *testing.T) {
	const interval = 2 * time.Second
	rs := startCluster(t, 3, func(c *Config) { c.BatchInterval = interval })
	a := rs[0]
	peers := *a.node.peers.Load()
	if len(peers) != 2 {
		t.Fatalf("%d peers, want 2", len(peers))
	}
	batches := a.node.Stats().Batches
	for i, id := range []string{"first", "second"} {
		if err := a.node.Publish(freeEvent(id)); err != nil {
			t.Fatal(err)
		}
		target := a.node.published.Load()
		ctx, cancel := context.WithTimeout(context.Background(), interval/4)
		err := a.node.Sent(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Sent %s: %v", id, err)
		}
		for _, p := range peers {
			if got := p.sent.Load(); got < target {
				t.Fatalf("Sent returned before %s's sender took seq %d (it took %d)", p.name, target, got)
			}
		}
		if got := a.node.Stats().Batches; got != batches+uint64(i)+1 {
			t.Fatalf("%d batches after Sent %s, want %d", got, id, batches+uint64(i)+1)
		}
	}
	for _, r := range rs[1:] {
		testutil.Eventually(t, time.Second, "both frees applied", func() bool { return r.sink.appliedFrom("r0") >= 2 })
	}
}

// TestSentWithoutPeersReturnsAtOnce: a replica alone has nobody to wait
// for (and nothing is published before the first event).
func TestSentWithoutPeersReturnsAtOnce(t *testing.T) {
	r := startReplica(t, "alone", nil, func(c *Config) { c.BatchInterval = time.Hour })
	if err := r.node.Sent(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.node.Publish(freeEvent("x")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.node.Sent(ctx); err != nil {
		t.Fatal(err)
	}
	if w := r.node.Stats().AckWaits; w != 0 {
		t.Fatalf("%d waits without peers", w)
	}
}

// barrierNode is a Node with only what Sent reads, and peers whose
// senders the test drives by hand (handed, droppedFor, quit).
func barrierNode(timeout time.Duration, names ...string) (*Node, []*peerSender) {
	n := &Node{cfg: Config{BatchInterval: time.Millisecond, AckTimeout: timeout}, log: quietLogger,
		urgent: make(chan struct{}, 1), stop: make(chan struct{})}
	var peers []*peerSender
	for _, name := range names {
		peers = append(peers, &peerSender{name: name, quit: make(chan struct{})})
	}
	n.peers.Store(&peers)
	return n, peers
}

// TestSentGivesUpOnASlowPeer: a peer whose sender does not take the
// events in time is given up on (counted as a timeout) while the others
// are waited for; later calls skip it (peer_stalled) until its sender
// moves again; a peer whose queue dropped the events is given up on at
// once; a peer that departs is not waited for.
func TestSentGivesUpOnASlowPeer(t *testing.T) {
	const timeout = 50 * time.Millisecond
	n, ps := barrierNode(timeout, "fast", "slow")
	fast, slow := ps[0], ps[1]
	publish := func(seq uint64) {
		n.published.Store(seq)
		go func() {
			<-n.urgent // the batcher's part: asked for an early batch
			n.handed(fast, seq)
		}()
	}

	publish(1)
	start := time.Now()
	if err := n.Sent(context.Background()); !errors.Is(err, ErrNotSent) {
		t.Fatalf("Sent with a silent peer: %v, want ErrNotSent", err)
	}
	if waited := time.Since(start); waited < timeout {
		t.Fatalf("gave up after %v, before the timeout %v", waited, timeout)
	}
	if st := n.stats.snapshot(); st.AckTimeouts != 1 || st.AckWaits != 1 || !slow.stalled.Load() {
		t.Fatalf("after the timeout: %+v, stalled %v", st, slow.stalled.Load())
	}

	// Stalled: not waited for.
	publish(2)
	if err := n.Sent(context.Background()); !errors.Is(err, ErrNotSent) {
		t.Fatalf("Sent with a stalled peer: %v, want ErrNotSent", err)
	}
	if st := n.stats.snapshot(); st.AckStalled != 1 || st.AckTimeouts != 1 {
		t.Fatalf("after the stalled call: %+v", st)
	}

	// The slow sender catches up: waited for again, and enough.
	n.handed(slow, 2)
	n.published.Store(3)
	go func() {
		<-n.urgent
		n.handed(fast, 3)
		n.handed(slow, 3)
	}()
	if err := n.Sent(context.Background()); err != nil {
		t.Fatalf("Sent once the peer caught up: %v", err)
	}

	// A dropped batch is given up on without waiting for the timeout.
	publish(4)
	n.droppedFor(slow, 4)
	start = time.Now()
	if err := n.Sent(context.Background()); !errors.Is(err, ErrNotSent) {
		t.Fatalf("Sent after a drop: %v, want ErrNotSent", err)
	}
	if st := n.stats.snapshot(); st.AckQueueFull != 1 || time.Since(start) >= timeout {
		t.Fatalf("after the drop (%v): %+v", time.Since(start), st)
	}

	// A peer departing while waited for ends the wait.
	n.published.Store(5)
	n.handed(fast, 5)
	go close(slow.quit)
	if err := n.Sent(context.Background()); err != nil {
		t.Fatalf("Sent with a departing peer: %v", err)
	}

	// The caller's context ends the wait (nothing counted as given up).
	n2, _ := barrierNode(time.Hour, "silent")
	n2.published.Store(1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n2.Sent(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sent with a cancelled context: %v", err)
	}
	if st := n2.stats.snapshot(); st.AckTimeouts+st.AckStalled+st.AckQueueFull != 0 {
		t.Fatalf("a cancelled wait counted as given up: %+v", st)
	}
}

// TestAckGap: an acknowledgement's batch leaves at most a millisecond
// after the last one, or the batch interval if shorter.
func TestAckGap(t *testing.T) {
	for _, c := range []struct{ interval, want time.Duration }{
		{DefaultBatchInterval, time.Millisecond}, {time.Millisecond, time.Millisecond},
		{200 * time.Microsecond, 200 * time.Microsecond}, {time.Second, time.Millisecond},
	} {
		if got := (Config{BatchInterval: c.interval}).ackGap(); got != c.want {
			t.Errorf("batch interval %v: gap %v, want %v", c.interval, got, c.want)
		}
	}
}
