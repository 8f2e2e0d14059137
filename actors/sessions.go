package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/sessions"
)

// The scheduler owns the sticky-session table (package sessions): it
// reads a session's binding when a decision starts, keeps or moves it when
// the decision is made, ends sessions, applies peers' writes (handed over
// by the replication edge) and answers the anti-entropy queries. No other
// goroutine touches the table.

// recordSession binds, keeps or moves a routed request's session and
// gossips the change. A session that had no binding when its decision
// started but has one now was bound by a concurrent request: that first
// binding stays.
func (s *schedulerActor) recordSession(r *decide.Session, now time.Time) {
	id := r.ID
	if _, live := s.sessions.Lookup(id, now); live && !r.WasBound {
		return
	}
	e, out := s.sessions.Record(id, r.Worker, now)
	switch out {
	case sessions.Kept:
		return
	case sessions.Bound:
		s.obs.SessionEvent("bound", 1)
	case sessions.Moved:
		reason := r.MoveReason
		if reason == "" {
			reason = sessions.MoveExcluded // the selection itself avoided it (cannot happen without a reason)
		}
		s.obs.SessionMoved(string(reason))
	}
	s.gossip.send(sessionEvent(e))
}

// endSession ends a session for DELETE /sessions/{id}.
func (s *schedulerActor) endSession(ctx actor.Context, m *messages.EndSession) {
	if err := s.sessions.CheckID(m.SessionId); err != nil {
		ctx.Respond(&messages.EndSessionReply{Error: err.Error()})
		return
	}
	e, ok := s.sessions.End(m.SessionId, time.Now())
	if ok {
		s.obs.SessionEvent("ended", 1)
		s.gossip.send(sessionEvent(e))
	}
	ctx.Respond(&messages.EndSessionReply{Found: ok})
}

// querySession answers GET /sessions/{id}: the live binding, if any.
func (s *schedulerActor) querySession(ctx actor.Context, m *messages.SessionQuery) {
	if err := s.sessions.CheckID(m.SessionId); err != nil {
		ctx.Respond(&messages.SessionReply{Error: err.Error()})
		return
	}
	e, ok := s.sessions.Lookup(m.SessionId, time.Now())
	if !ok {
		ctx.Respond(&messages.SessionReply{})
		return
	}
	ctx.Respond(&messages.SessionReply{Found: true, Worker: rankMsg(e.Worker), LastUsedUnixNano: e.LastUsed})
}

// applySessions merges peers' session writes (gossiped, or a peer's whole
// table during anti-entropy).
func (s *schedulerActor) applySessions(evs []*messages.SequenceEvent) {
	now := time.Now()
	for _, ev := range evs {
		e, ok := sessionEntry(ev)
		if !ok {
			s.obs.SessionEvent("rejected", 1)
			continue
		}
		if _, err := s.sessions.Apply(e, now); err != nil {
			s.obs.SessionEvent("rejected", 1)
			s.log.Debug("dropped a peer's session entry", "origin", ev.Origin, "err", err)
		}
	}
	s.reportSessions()
}

// expireSessions drops idle sessions and reports the table.
func (s *schedulerActor) expireSessions(now time.Time) {
	s.sessions.Expire(now)
	s.reportSessions()
}

// reportSessions passes the table's size and new drops to the observer.
func (s *schedulerActor) reportSessions() {
	st := s.sessions.Stats()
	if d := st.Evicted - s.sessionStats.Evicted; d > 0 {
		s.obs.SessionEvent("evicted", int(d))
	}
	if d := st.Expired - s.sessionStats.Expired; d > 0 {
		s.obs.SessionEvent("expired", int(d))
	}
	s.sessionStats = st
	s.obs.SessionCount(s.sessions.Len())
}

func (s *schedulerActor) sessionSnapshot() *messages.SessionTable {
	entries := s.sessions.Snapshot(time.Now())
	out := &messages.SessionTable{Entries: make([]*messages.SequenceEvent, len(entries))}
	for i, e := range entries {
		out.Entries[i] = sessionEvent(e)
	}
	return out
}

// sessionEvent is a table entry as gossip carries it.
func sessionEvent(e sessions.Entry) *messages.SequenceEvent {
	if e.Ended {
		return &messages.SequenceEvent{Data: &messages.SequenceEvent_SessionEnded{SessionEnded: &messages.SessionEnded{
			SessionId: e.ID, Stamp: e.Version.Stamp, Writer: e.Version.Writer, LastUsedUnixNano: e.LastUsed, Worker: rankMsg(e.Worker),
		}}}
	}
	return &messages.SequenceEvent{Data: &messages.SequenceEvent_SessionBound{SessionBound: &messages.SessionBound{
		SessionId: e.ID, Worker: rankMsg(e.Worker), Stamp: e.Version.Stamp, Writer: e.Version.Writer, LastUsedUnixNano: e.LastUsed,
	}}}
}

// sessionEntry reads a gossiped session write (false: not one).
func sessionEntry(ev *messages.SequenceEvent) (sessions.Entry, bool) {
	switch d := ev.GetData().(type) {
	case *messages.SequenceEvent_SessionBound:
		b := d.SessionBound
		if b == nil || b.Worker == nil {
			return sessions.Entry{}, false
		}
		return sessions.Entry{ID: b.SessionId, Worker: rankOf(b.Worker),
			Version: sessions.Version{Stamp: b.Stamp, Writer: b.Writer}, LastUsed: b.LastUsedUnixNano}, true
	case *messages.SequenceEvent_SessionEnded:
		x := d.SessionEnded
		if x == nil {
			return sessions.Entry{}, false
		}
		return sessions.Entry{ID: x.SessionId, Worker: rankOf(x.Worker), Ended: true,
			Version: sessions.Version{Stamp: x.Stamp, Writer: x.Writer}, LastUsed: x.LastUsedUnixNano}, true
	}
	return sessions.Entry{}, false
}

// isSessionEvent tells session writes apart from request lifecycle events
// in a peer's stream.
func isSessionEvent(ev *messages.SequenceEvent) bool {
	switch ev.GetData().(type) {
	case *messages.SequenceEvent_SessionBound, *messages.SequenceEvent_SessionEnded:
		return true
	}
	return false
}
