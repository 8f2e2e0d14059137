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

// recordSession carries out a decision's Session effect
// (decide.BindSession) and gossips the change.
func (s *schedulerActor) recordSession(r *decide.Session, now time.Time) {
	e, out, reason, changed := decide.BindSession(s.sessions, r, now)
	if !changed {
		return
	}
	switch out {
	case sessions.Bound:
		s.obs.SessionEvent("bound", 1)
	case sessions.Moved:
		s.obs.SessionMoved(string(reason))
	}
	s.gossip.send(decide.SessionEvent(e))
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
		s.gossip.send(decide.SessionEvent(e))
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
		e, ok := decide.SessionEntry(ev)
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
		out.Entries[i] = decide.SessionEvent(e)
	}
	return out
}
