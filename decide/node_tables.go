package decide

import (
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/sessions"
	"github.com/kvrouter/kvrouter/tracking"
)

// ---- the requests this replica routed ----

// lifecycle applies a prefill-completed, output-block, lease-renewal or
// free step of a request this replica routed, and gossips it. A request
// it did not route may be a peer's: the replication edge answers for
// those.
func (n *Node) lifecycle(now time.Time, m *messages.RequestLifecycle) {
	e, ok := n.local.Lookup(m.RequestId)
	if !ok {
		n.fx.out = append(n.fx.out, &n.fx.forwarded)
		return
	}
	if !n.ranks.Has(e.Rank) {
		n.local.Untrack(m.RequestId)
		n.respond(&messages.LifecycleReply{RequestId: m.RequestId, Found: false})
		return
	}
	msg, ev := LifecycleStep(m)
	if msg != nil {
		n.toRank(e.Rank, msg, false)
	}
	if ev != nil {
		n.gossip(ev)
		if _, ok := m.Step.(*messages.RequestLifecycle_Free); ok {
			n.freed(m.RequestId)
		}
		n.tryDequeue(now)
	}
	n.respond(&messages.LifecycleReply{RequestId: m.RequestId, Found: true})
}

// LifecycleStep is what a request's lifecycle step sends its rank's
// sequence actor, and the event that gossips it (nil: not gossiped).
// Prefill completions and frees are gossiped; output growth and lease
// renewals are not (as in Dynamo): they are frequent, peers converge on
// the next add or free anyway, and only the routing replica holds a
// lease.
func LifecycleStep(m *messages.RequestLifecycle) (toRank any, gossip *messages.SequenceEvent) {
	switch st := m.Step.(type) {
	case *messages.RequestLifecycle_PrefillCompleted:
		return st.PrefillCompleted, &messages.SequenceEvent{Data: &messages.SequenceEvent_PrefillCompleted{PrefillCompleted: st.PrefillCompleted}}
	case *messages.RequestLifecycle_Free:
		return st.Free, &messages.SequenceEvent{Data: &messages.SequenceEvent_Free{Free: st.Free}}
	case *messages.RequestLifecycle_OutputBlock:
		return st.OutputBlock, nil
	case *messages.RequestLifecycle_RenewLease:
		return st.RenewLease, nil
	}
	return nil, nil
}

// ChangeOf reads a gossiped add, prefill completion or free as a change
// of the table of tracked requests.
func ChangeOf(ev *messages.SequenceEvent) tracking.Change {
	c := tracking.Change{Origin: ev.Origin}
	switch d := ev.Data.(type) {
	case *messages.SequenceEvent_Add:
		c.Step, c.RequestID = tracking.StepAdd, d.Add.RequestId
		c.Rank, c.Stride = RankOf(d.Add.Worker), int(d.Add.Stride)
	case *messages.SequenceEvent_PrefillCompleted:
		c.Step, c.RequestID = tracking.StepPrefillCompleted, d.PrefillCompleted.RequestId
	case *messages.SequenceEvent_Free:
		c.Step, c.RequestID = tracking.StepFree, d.Free.RequestId
	}
	return c
}

// peerStep applies a peer's prefill-completed or free of a request this
// replica routed (its client finished it through the peer). The peer
// gossiped it already, so it is not published again.
func (n *Node) peerStep(now time.Time, ev *messages.SequenceEvent) {
	c := ChangeOf(ev)
	e, ok := n.local.Lookup(c.RequestID)
	if !ok || ev.Origin == n.cfg.Replica {
		return // nobody here holds it (already freed, or never seen)
	}
	if n.ranks.Has(e.Rank) {
		n.toRank(e.Rank, ev, false)
	}
	if c.Step == tracking.StepFree {
		n.freed(c.RequestID)
	}
	n.tryDequeue(now)
}

// freed untracks a request that ended and its prefill hop (Freed), and
// frees and gossips the hop if it was still tracked on a registered rank.
func (n *Node) freed(id string) {
	hop, e, ok := Freed(n.local, id)
	if ok && n.ranks.Has(e.Rank) {
		n.free(e.Rank, hop)
	}
}

// ---- index trust ----

// noteRouted reports that w was sent work that owes KV events, at most
// once per TrustNoteEvery per rank.
func (n *Node) noteRouted(now time.Time, w kv.WorkerWithDpRank) {
	if !n.cfg.Trust {
		return
	}
	at := now.UnixNano()
	if last, ok := n.trustNoted[w]; ok && at-last < int64(TrustNoteEvery) {
		return
	}
	if n.trustNoted == nil {
		n.trustNoted = map[kv.WorkerWithDpRank]int64{}
	}
	if len(n.trustNoted) > 4*len(n.ranks.List)+64 {
		clear(n.trustNoted) // ranks that left; rebuilt as decisions come
	}
	n.trustNoted[w] = at
	put(&n.fx.out, &n.fx.routed, Routed{Rank: w, At: at})
}

// notePeerStart notes a rank whose published load shows a request
// started with at least one block to prefill: a peer replica's decision
// (or this one's, noted already) that makes the engine store blocks.
// Replicas thus agree on which ranks owe events. A request started and
// freed within one publication, or a fleet that does not track prefill
// tokens, shows nothing here (only own decisions then count).
func (n *Node) notePeerStart(now time.Time, m *messages.RankLoad) {
	if !n.cfg.Trust || m.Full {
		return
	}
	w := RankOf(m.Worker)
	last := n.dec.board.Last(w)
	if last == nil {
		return
	}
	if m.ActiveRequests > last.ActiveRequests && m.ActivePrefillTokens >= last.ActivePrefillTokens+uint64(n.cfg.Decider.BlockSize) {
		n.noteRouted(now, w)
	}
}

// ---- sticky sessions ----

// The session table is cluster state: this replica reads a session's
// binding when a decision starts, keeps or moves it when the decision is
// made, ends sessions, applies peers' writes (handed over by the
// replication edge) and answers the anti-entropy queries.

// bindSession carries out a decision's Session effect (BindSession) and
// gossips the change.
func (n *Node) bindSession(now time.Time, s *Session) {
	e, out, reason, changed := BindSession(n.sess, s, now)
	if !changed {
		return
	}
	switch out {
	case sessions.Bound:
		n.count(CountSession, "bound", 1)
	case sessions.Moved:
		n.count(CountSessionMoved, string(reason), 1)
	}
	n.gossip(SessionEvent(e))
}

// endSession ends a session for DELETE /sessions/{id}.
func (n *Node) endSession(now time.Time, id string) {
	if err := n.sess.CheckID(id); err != nil {
		n.respond(&messages.EndSessionReply{Error: err.Error()})
		return
	}
	e, ok := n.sess.End(id, now)
	if ok {
		n.count(CountSession, "ended", 1)
		n.gossip(SessionEvent(e))
	}
	n.respond(&messages.EndSessionReply{Found: ok})
}

// querySession answers GET /sessions/{id}: the live binding, if any.
func (n *Node) querySession(now time.Time, id string) {
	if err := n.sess.CheckID(id); err != nil {
		n.respond(&messages.SessionReply{Error: err.Error()})
		return
	}
	e, ok := n.sess.Lookup(id, now)
	if !ok {
		n.respond(&messages.SessionReply{})
		return
	}
	n.respond(&messages.SessionReply{Found: true, Worker: RankMsg(e.Worker), LastUsedUnixNano: e.LastUsed})
}

// applySessions merges peers' session writes (gossiped, or a peer's whole
// table during anti-entropy).
func (n *Node) applySessions(now time.Time, evs []*messages.SequenceEvent) {
	for _, ev := range evs {
		e, ok := SessionEntry(ev)
		if !ok {
			n.count(CountSession, "rejected", 1)
			continue
		}
		if _, err := n.sess.Apply(e, now); err != nil {
			n.count(CountSession, "rejected", 1)
			put(&n.fx.out, &n.fx.rejected, SessionRejected{Origin: ev.Origin, Err: err})
		}
	}
	n.reportSessions()
}

// reportSessions reports the table's size and new drops.
func (n *Node) reportSessions() {
	st := n.sess.Stats()
	if d := st.Evicted - n.sessStats.Evicted; d > 0 {
		n.count(CountSession, "evicted", int(d))
	}
	if d := st.Expired - n.sessStats.Expired; d > 0 {
		n.count(CountSession, "expired", int(d))
	}
	n.sessStats = st
	n.gauge(GaugeSessions, n.sess.Len())
}
