package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/messages"
)

// replica is one in-process router replica: a Node and its Sink.
type replica struct {
	node *Node
	sink *holder
}

var quietLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func testConfig(id string) Config {
	c := LocalTestConfig()
	c.ReplicaID = id
	c.Logger = quietLogger
	return c
}

// startReplica starts a node on loopback with a random port, joining join.
func startReplica(t testing.TB, id string, join []string, tweak func(*Config)) *replica {
	t.Helper()
	cfg := testConfig(id)
	cfg.Join = join
	if tweak != nil {
		tweak(&cfg)
	}
	h := newHolder(id)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg, h)
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	t.Cleanup(n.Shutdown)
	return &replica{node: n, sink: h}
}

// startCluster starts size replicas, all joined through the first, and
// waits until every one sees them all.
func startCluster(t *testing.T, size int, tweak func(*Config)) []*replica {
	t.Helper()
	rs := []*replica{startReplica(t, "r0", nil, tweak)}
	for i := 1; i < size; i++ {
		rs = append(rs, startReplica(t, fmt.Sprintf("r%d", i), []string{rs[0].node.LocalAddr()}, tweak))
	}
	testutil.Eventually(t, 5*time.Second, "full membership", func() bool {
		for _, r := range rs {
			if r.node.Stats().Members != size {
				return false
			}
		}
		return true
	})
	return rs
}

func TestPublishReachesEveryPeer(t *testing.T) {
	rs := startCluster(t, 3, nil)
	a := rs[0]
	arrived := make(chan time.Time, 1)
	rs[1].sink.setOnApply(func(ev *messages.SequenceEvent, at time.Time) {
		if ev.GetAdd().GetRequestId() == "probe" {
			arrived <- at
		}
	})
	sent := time.Now()
	if err := a.sink.local(a.node, addEvent("probe", 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-arrived:
		t.Logf("one-event gossip delay A→B: %v", at.Sub(sent))
	case <-time.After(2 * time.Second):
		t.Fatal("B did not receive the event")
	}

	for i := range 20 {
		id := fmt.Sprintf("req-%d", i)
		mustPublish(t, a, addEvent(id, uint64(i)))
		if i%2 == 0 {
			mustPublish(t, a, prefillEvent(id))
		}
		if i%5 == 0 {
			mustPublish(t, a, freeEvent(id))
		}
	}
	want := a.sink.view("r0")
	for _, r := range rs[1:] {
		testutil.Eventually(t, 2*time.Second, r.node.ID()+" to hold A's requests", func() bool {
			return maps.Equal(r.sink.view("r0"), want)
		})
	}
	if got := len(want); got != 17 { // probe + 20 adds, 4 freed (0, 5, 10, 15)
		t.Fatalf("A holds %d requests, want 17", got)
	}
	if got := a.sink.appliedFrom("r0"); got != 0 {
		t.Fatalf("A applied %d of its own events", got)
	}
	// 1 probe + 20 adds + 10 prefills + 4 frees.
	if st := a.node.Stats(); st.EventsPublished != 35 || st.EventsSent != 35 || st.Batches == 0 {
		t.Fatalf("A stats = %+v, want 35 published and sent", st)
	}
}

func mustPublish(t *testing.T, r *replica, ev *messages.SequenceEvent) {
	t.Helper()
	if err := r.sink.local(r.node, ev); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func TestOwnEchoIgnored(t *testing.T) {
	rs := startCluster(t, 2, nil)
	a := rs[0]
	echo, err := encodeBatch([]*messages.SequenceEvent{{Origin: "r0", Seq: 1, Data: addEvent("x").Data}})
	if err != nil {
		t.Fatal(err)
	}
	// As memberlist's paths deliver it: signed by its (our) replica.
	memberDelegate{a.node}.NotifyMsg(encodeSigned(a.node.signKey, "", "r0", echo))
	testutil.Eventually(t, time.Second, "echo counted", func() bool { return a.node.Stats().EchoesIgnored == 1 })
	if v := a.sink.view("r0"); len(v) != 0 {
		t.Fatalf("echo reached the sink: %v", v)
	}
}

func TestFailedReplicaIsDropped(t *testing.T) {
	rs := startCluster(t, 3, nil)
	c := rs[2]
	mustPublish(t, c, addEvent("c-1", 1))
	for _, r := range rs[:2] {
		testutil.Eventually(t, 2*time.Second, "C's request at "+r.node.ID(), func() bool { return len(r.sink.view("r2")) == 1 })
	}
	bound := c.node.cfg.FailureDetectionBound(3) + time.Second // slack for a loaded CI machine
	killed := time.Now()
	c.node.Shutdown() // no Leave: looks like a crash
	for _, r := range rs[:2] {
		testutil.Eventually(t, bound, "DropOrigin(r2) at "+r.node.ID(), func() bool {
			_, ok := r.sink.dropTime("r2")
			return ok
		})
		at, _ := r.sink.dropTime("r2")
		t.Logf("%s dropped the crashed replica after %v (bound %v)", r.node.ID(), at.Sub(killed), bound)
		if len(r.sink.view("r2")) != 0 {
			t.Fatalf("%s still holds C's requests", r.node.ID())
		}
		if m := memberByID(r.node.Members(), "r2"); m.Alive {
			t.Fatalf("%s lists r2 as alive", r.node.ID())
		}
	}
}

func TestGracefulLeaveIsDroppedQuickly(t *testing.T) {
	rs := startCluster(t, 3, nil)
	c := rs[2]
	mustPublish(t, c, addEvent("c-1", 1))
	testutil.Eventually(t, 2*time.Second, "C's request at A", func() bool { return len(rs[0].sink.view("r2")) == 1 })
	left := time.Now()
	if err := c.node.Leave(time.Second); err != nil {
		t.Fatalf("leave: %v", err)
	}
	c.node.Shutdown()
	const bound = time.Second
	for _, r := range rs[:2] {
		testutil.Eventually(t, bound, "DropOrigin(r2) at "+r.node.ID(), func() bool {
			_, ok := r.sink.dropTime("r2")
			return ok
		})
		at, _ := r.sink.dropTime("r2")
		t.Logf("%s dropped the leaving replica %v after Leave began", r.node.ID(), at.Sub(left))
	}
	if err := c.node.Publish(addEvent("late")); err != ErrClosed {
		t.Fatalf("Publish after Leave = %v, want ErrClosed", err)
	}
}

func memberByID(ms []Member, id string) Member {
	for _, m := range ms {
		if m.ReplicaID == id {
			return m
		}
	}
	return Member{}
}

func TestAntiEntropyRepairsLostEvents(t *testing.T) {
	rs := startCluster(t, 3, nil)
	a, b := rs[0], rs[1]
	b.sink.loseNext("r0", 5) // B's holder silently drops A's next 5 events
	for i := range 12 {
		id := fmt.Sprintf("a-%d", i)
		mustPublish(t, a, addEvent(id, uint64(i)))
		if i%3 == 0 {
			mustPublish(t, a, prefillEvent(id))
		}
	}
	want := a.sink.view("r0")
	testutil.Eventually(t, 2*time.Second, "C in sync", func() bool { return maps.Equal(rs[2].sink.view("r0"), want) })
	// B applied everything yet lost 5: only anti-entropy can fix it.
	testutil.Eventually(t, 2*time.Second, "B to apply all of A's events", func() bool {
		return b.sink.appliedFrom("r0") >= 16
	})
	if maps.Equal(b.sink.view("r0"), want) {
		t.Fatal("B is in sync before anti-entropy: the test lost nothing")
	}
	d := testutil.Eventually(t, 10*a.node.cfg.AntiEntropyInterval, "B repaired", func() bool {
		return maps.Equal(b.sink.view("r0"), want)
	})
	st := b.node.Stats()
	t.Logf("B repaired after %v (anti-entropy interval %v): %d mismatches, %d repairs",
		d, a.node.cfg.AntiEntropyInterval, st.DigestMismatches, st.Repairs)
	if st.DigestMismatches == 0 || st.Repairs == 0 {
		t.Fatalf("B stats = %+v, want a mismatch and a repair", st)
	}
	// Traffic after the repair keeps flowing in order.
	mustPublish(t, a, freeEvent("a-0"))
	delete(want, "a-0")
	testutil.Eventually(t, 2*time.Second, "B follows after repair", func() bool { return maps.Equal(b.sink.view("r0"), want) })
}

func TestLateJoinerGetsFullState(t *testing.T) {
	rs := startCluster(t, 2, nil)
	a := rs[0]
	for i := range 10 {
		mustPublish(t, a, addEvent(fmt.Sprintf("a-%d", i)))
	}
	mustPublish(t, a, prefillEvent("a-3"))
	want := a.sink.view("r0")
	// Once B holds them, A's batches are gone: the late joiner never sees
	// these events and must learn them from A's digest and full state.
	testutil.Eventually(t, 2*time.Second, "B holds A's requests", func() bool { return maps.Equal(rs[1].sink.view("r0"), want) })
	late := startReplica(t, "late", []string{a.node.LocalAddr()}, nil)
	d := testutil.Eventually(t, 10*a.node.cfg.AntiEntropyInterval, "late joiner holds A's requests", func() bool {
		return maps.Equal(late.sink.view("r0"), want)
	})
	st := late.node.Stats()
	t.Logf("late joiner converged after %v with %d repairs", d, st.Repairs)
	if st.Repairs == 0 || st.EventsReceived != 0 {
		t.Fatalf("late joiner stats = %+v, want a repair and no replayed events", st)
	}
}

func TestLargeBatchDeliveredIntact(t *testing.T) {
	rs := startCluster(t, 2, nil)
	a, b := rs[0], rs[1]
	hashes := make([]uint64, 400) // 3.2 kB of hashes: cannot fit one UDP packet
	for i := range hashes {
		hashes[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	got := make(chan *messages.SequenceEvent, 1)
	b.sink.setOnApply(func(ev *messages.SequenceEvent, _ time.Time) { got <- ev })
	big := addEvent("big", hashes...)
	mustPublish(t, a, big)
	select {
	case ev := <-got:
		if !proto.Equal(ev.GetAdd(), big.GetAdd()) {
			t.Fatal("large add arrived altered")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("large add did not arrive")
	}
	// The sender counts after the send returns, which may be after B
	// applied the event.
	testutil.EventuallyNil(t, 2*time.Second, func() error {
		if st := a.node.Stats(); st.TCPMessages+st.StreamMessages == 0 || st.BytesSent < 3200 {
			return fmt.Errorf("A stats = %+v, want the batch sent over TCP", st)
		}
		return nil
	})
}

func TestStartRejectsBadInput(t *testing.T) {
	if _, err := Start(context.Background(), Config{}, newHolder("x")); err == nil {
		t.Fatal("Start accepted an empty config")
	}
	if _, err := Start(context.Background(), testConfig("x"), nil); err == nil {
		t.Fatal("Start accepted a nil sink")
	}
	r := startReplica(t, "solo", nil, nil)
	for _, ev := range []*messages.SequenceEvent{nil, {}, addEvent(""), freeEvent("\xff")} {
		if err := r.node.Publish(ev); err == nil {
			t.Fatalf("Publish(%v) accepted", ev)
		}
	}
	if r.node.Stats().Members != 1 || r.node.LocalAddr() == "" {
		t.Fatalf("solo node: members %d, addr %q", r.node.Stats().Members, r.node.LocalAddr())
	}
}

func TestMembersCarryMetadata(t *testing.T) {
	rs := startCluster(t, 2, func(c *Config) {
		c.HTTPAddr = "10.0.0.1:8080"
		c.Version = "v1.2.3"
	})
	m := memberByID(rs[0].node.Members(), "r1")
	want := Member{ReplicaID: "r1", Addr: rs[1].node.LocalAddr(), HTTPAddr: "10.0.0.1:8080", Version: "v1.2.3", Alive: true}
	if m != want {
		t.Fatalf("member = %+v, want %+v", m, want)
	}
}

// TestLostMessagesAreRepaired overflows A's one-message queue for its peer
// so that whole batches are dropped before they are sent, as lost packets
// or a stalled peer would lose them: the gaps and the tail must be
// recovered from A's full state.
func TestLostMessagesAreRepaired(t *testing.T) {
	a := startReplica(t, "r0", nil, func(c *Config) { c.BatchMaxEvents = 1; c.PeerQueueSize = 1 })
	b := startReplica(t, "r1", []string{a.node.LocalAddr()}, nil)
	testutil.Eventually(t, 5*time.Second, "membership", func() bool {
		return a.node.Stats().Members == 2 && b.node.Stats().Members == 2
	})
	for i := range 2000 {
		id := fmt.Sprintf("a-%d", i)
		mustPublish(t, a, addEvent(id, uint64(i)))
		if i%2 == 0 {
			mustPublish(t, a, freeEvent(id))
		}
	}
	want := a.sink.view("r0")
	d := testutil.Eventually(t, 20*a.node.cfg.AntiEntropyInterval, "B repaired", func() bool {
		return maps.Equal(b.sink.view("r0"), want)
	})
	st := b.node.Stats()
	drops := a.node.Stats().PeerQueueDrops
	t.Logf("B converged %v after the burst: A dropped %d messages for it, %d events lost, %d repairs", d, drops, st.EventsLost, st.Repairs)
	if drops == 0 || st.Repairs == 0 {
		t.Fatalf("A dropped %d, B stats = %+v: nothing was lost, the test proves nothing", drops, st)
	}
}

// An idle receiver checks deadlines once a second, but a gap that opens
// during that second is still given up on GapTimeout after it opened:
// opening it wakes the apply loop. Each round injects, signed by r1 as
// memberlist's paths deliver it, an event two Seqs past r1's last one.
func TestGapTimeoutWatchedFromAnIdleReceiver(t *testing.T) {
	rs := startCluster(t, 2, nil)
	a, b := rs[0], rs[1]
	mustPublish(t, b, addEvent("b-1", 1))
	testutil.Eventually(t, 2*time.Second, "b's first event at a", func() bool { return len(a.sink.view("r1")) == 1 })
	seq := uint64(1)
	for round := range 5 {
		time.Sleep(150 * time.Millisecond) // the apply loop is in its idle second
		seq += 2
		lost := a.node.Stats().EventsLost
		batch, err := encodeBatch([]*messages.SequenceEvent{{Origin: "r1", Seq: seq, Data: addEvent(fmt.Sprintf("b-gap-%d", round), 2).Data}})
		if err != nil {
			t.Fatal(err)
		}
		opened := time.Now()
		memberDelegate{a.node}.NotifyMsg(encodeSigned(b.node.signKey, "", "r1", batch))
		testutil.Eventually(t, 3*time.Second, "the gap given up", func() bool { return a.node.Stats().EventsLost > lost })
		if took, bound := time.Since(opened), a.node.cfg.GapTimeout+400*time.Millisecond; took > bound {
			t.Fatalf("round %d: a gap with a %v timeout was given up after %v", round, a.node.cfg.GapTimeout, took)
		}
	}
}
