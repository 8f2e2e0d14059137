package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/sessions"
)

// sessionHolder is a holder that also keeps a real session table, as the
// router's scheduler does.
type sessionHolder struct {
	*holder
	smu   sync.Mutex
	table *sessions.Table
}

func newSessionHolder(t testing.TB, self string) *sessionHolder {
	tb, err := sessions.New(sessions.Config{TTL: time.Hour, MaxSessions: 1000, MaxIDBytes: 64, ReplicaID: self})
	if err != nil {
		t.Fatal(err)
	}
	return &sessionHolder{holder: newHolder(self), table: tb}
}

func entryEvent(e sessions.Entry) *messages.SequenceEvent {
	w := &messages.WorkerRank{WorkerId: uint64(e.Worker.WorkerID), DpRank: e.Worker.DpRank}
	if e.Ended {
		return &messages.SequenceEvent{Data: &messages.SequenceEvent_SessionEnded{SessionEnded: &messages.SessionEnded{
			SessionId: e.ID, Stamp: e.Version.Stamp, Writer: e.Version.Writer, LastUsedUnixNano: e.LastUsed, Worker: w}}}
	}
	return &messages.SequenceEvent{Data: &messages.SequenceEvent_SessionBound{SessionBound: &messages.SessionBound{
		SessionId: e.ID, Worker: w, Stamp: e.Version.Stamp, Writer: e.Version.Writer, LastUsedUnixNano: e.LastUsed}}}
}

func eventEntry(ev *messages.SequenceEvent) (sessions.Entry, bool) {
	if b := ev.GetSessionBound(); b != nil {
		return sessions.Entry{ID: b.SessionId, Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(b.Worker.GetWorkerId()), DpRank: b.Worker.GetDpRank()},
			Version: sessions.Version{Stamp: b.Stamp, Writer: b.Writer}, LastUsed: b.LastUsedUnixNano}, true
	}
	if x := ev.GetSessionEnded(); x != nil {
		return sessions.Entry{ID: x.SessionId, Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(x.Worker.GetWorkerId()), DpRank: x.Worker.GetDpRank()},
			Version: sessions.Version{Stamp: x.Stamp, Writer: x.Writer}, LastUsed: x.LastUsedUnixNano, Ended: true}, true
	}
	return sessions.Entry{}, false
}

func (h *sessionHolder) ApplyRemote(ev *messages.SequenceEvent) {
	if e, ok := eventEntry(ev); ok {
		h.smu.Lock()
		h.table.Apply(e, time.Now())
		h.smu.Unlock()
		return
	}
	h.holder.ApplyRemote(ev)
}

func (h *sessionHolder) SessionDigest(context.Context) (Digest, error) {
	h.smu.Lock()
	defer h.smu.Unlock()
	d := h.table.Digest()
	return Digest{Count: d.Count, Hash: d.Hash}, nil
}

func (h *sessionHolder) SessionSnapshot(context.Context) ([]*messages.SequenceEvent, error) {
	h.smu.Lock()
	defer h.smu.Unlock()
	var out []*messages.SequenceEvent
	for _, e := range h.table.Snapshot(time.Now()) {
		out = append(out, entryEvent(e))
	}
	return out, nil
}

func (h *sessionHolder) MergeSessions(evs []*messages.SequenceEvent) {
	for _, ev := range evs {
		h.ApplyRemote(ev)
	}
}

// bind writes a session locally; publish=false plays a write whose
// gossip was lost.
func (h *sessionHolder) bind(n *Node, id string, w uint64, publish bool) {
	h.smu.Lock()
	e, _ := h.table.Record(id, kv.WorkerWithDpRank{WorkerID: kv.WorkerID(w)}, time.Now())
	h.smu.Unlock()
	if publish {
		if err := n.Publish(entryEvent(e)); err != nil {
			panic(err)
		}
	}
}

func (h *sessionHolder) end(n *Node, id string) {
	h.smu.Lock()
	e, ok := h.table.End(id, time.Now())
	h.smu.Unlock()
	if ok {
		_ = n.Publish(entryEvent(e))
	}
}

func (h *sessionHolder) lookup(id string) (uint64, bool) {
	h.smu.Lock()
	defer h.smu.Unlock()
	e, ok := h.table.Lookup(id, time.Now())
	return uint64(e.Worker.WorkerID), ok
}

func startSessionReplica(t *testing.T, id string, join []string) (*Node, *sessionHolder) {
	t.Helper()
	cfg := testConfig(id)
	cfg.Join = join
	h := newSessionHolder(t, id)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	return n, h
}

// TestSessionsGossipAndConverge: published session writes reach peers;
// writes whose gossip was lost, and a replica that joins late, are
// repaired by the session digest and a table merge; a conflicting pair of
// writes ends the same on both sides; readiness waits for the sessions.
func TestSessionsGossipAndConverge(t *testing.T) {
	n0, h0 := startSessionReplica(t, "r0", nil)
	n1, h1 := startSessionReplica(t, "r1", []string{n0.LocalAddr()})
	testutil.Eventually(t, 5*time.Second, "membership", func() bool { return n1.Stats().Members == 2 })

	h0.bind(n0, "gossiped", 1, true)
	testutil.Eventually(t, 5*time.Second, "gossiped bind applied", func() bool {
		w, ok := h1.lookup("gossiped")
		return ok && w == 1
	})
	// Lost writes on both sides, one of them on the same session.
	for i := range 5 {
		h0.bind(n0, fmt.Sprintf("lost-%d", i), 2, false)
	}
	h1.bind(n1, "lost-0", 3, false) // later: wins on both sides
	h0.end(n0, "gossiped")

	n2, h2 := startSessionReplica(t, "r2", []string{n0.LocalAddr()})
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		d0, _ := h0.SessionDigest(context.Background())
		d1, _ := h1.SessionDigest(context.Background())
		d2, _ := h2.SessionDigest(context.Background())
		if d0 != d1 || d0 != d2 {
			return fmt.Errorf("digests %+v %+v %+v", d0, d1, d2)
		}
		return nil
	})
	for _, h := range []*sessionHolder{h0, h1, h2} {
		if w, ok := h.lookup("lost-0"); !ok || w != 3 {
			t.Fatalf("%s: lost-0 on %d (%v), want 3 (the later write)", h.self, w, ok)
		}
		if w, ok := h.lookup("lost-4"); !ok || w != 2 {
			t.Fatalf("%s: lost-4 on %d (%v)", h.self, w, ok)
		}
		if _, ok := h.lookup("gossiped"); ok {
			t.Fatalf("%s: an ended session is still bound", h.self)
		}
	}
	testutil.EventuallyNil(t, 5*time.Second, n2.PeersSynced)
	if st := n2.Stats(); st.SessionMerges == 0 || st.SessionRequests == 0 {
		t.Fatalf("the late replica merged no table: %+v", st)
	}
}

// TestSessionWriteInAnotherName: a member cannot write a session version
// in another replica's name through its event stream.
func TestSessionWriteInAnotherName(t *testing.T) {
	n0, _ := startSessionReplica(t, "r0", nil)
	n1, h1 := startSessionReplica(t, "r1", []string{n0.LocalAddr()})
	testutil.Eventually(t, 5*time.Second, "membership", func() bool { return n1.Stats().Members == 2 })
	forged := entryEvent(sessions.Entry{ID: "s", Worker: kv.WorkerWithDpRank{WorkerID: 9}, LastUsed: time.Now().UnixNano(),
		Version: sessions.Version{Stamp: time.Now().UnixNano(), Writer: "r1"}})
	if err := n0.Publish(forged); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "forged write counted", func() bool { return n1.Stats().ForeignFrames > 0 })
	if _, ok := h1.lookup("s"); ok {
		t.Fatal("a write in another replica's name was applied")
	}
}

// TestSessionsNotAwaitedFromPeersWithoutThem: a replica keeping sessions
// is ready next to a peer that keeps none (an older version), which
// advertises no session table and sends no session digest.
func TestSessionsNotAwaitedFromPeersWithoutThem(t *testing.T) {
	n0, _ := startSessionReplica(t, "r0", nil)
	old := startReplica(t, "r1", []string{n0.LocalAddr()}, nil)
	testutil.Eventually(t, 5*time.Second, "membership", func() bool { return old.node.Stats().Members == 2 })
	testutil.EventuallyNil(t, 5*time.Second, n0.PeersSynced)
	if !n0.memberKeepsSessions("r0") || n0.memberKeepsSessions("r1") {
		t.Fatal("session capability not advertised as it should be")
	}
}
