package decide

import (
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sessions"
	"github.com/kvrouter/kvrouter/tracking"
)

// The session table (package sessions) and the table of routed requests
// (package tracking) are their owner's; these are the decision's rules
// over them, and the session entries as gossip carries them.

// SessionOf is the table's answer for a request's session as a decision
// starts (Start.Session): the id's verdict and its live binding.
func SessionOf(t *sessions.Table, id string, now time.Time) SessionAnswer {
	var a SessionAnswer
	if id == "" {
		return a
	}
	if a.IDError = t.CheckID(id); a.IDError != nil {
		return a
	}
	if e, ok := t.Lookup(id, now); ok {
		a = SessionAnswer{Bound: true, Worker: e.Worker, LastUsed: e.LastUsed}
	}
	return a
}

// BindSession carries out a Session effect on the table: it binds, keeps
// or moves the session and returns the entry to gossip (changed false:
// nothing to gossip; a refresh of a kept binding is gossiped) with the
// outcome and, for a move, its reason. A
// session that had no binding when its decision started but has one now
// was bound by a concurrent request: that first binding stays.
func BindSession(t *sessions.Table, s *Session, now time.Time) (e sessions.Entry, out sessions.Outcome, reason sessions.MoveReason, changed bool) {
	if _, live := t.Lookup(s.ID, now); live && !s.WasBound {
		return sessions.Entry{}, sessions.Kept, "", false
	}
	e, out = t.Record(s.ID, s.Worker, now)
	switch out {
	case sessions.Kept:
		return e, out, "", false
	case sessions.Moved:
		reason = s.MoveReason
		if reason == "" {
			reason = sessions.MoveExcluded // the selection itself avoided it (cannot happen without a reason)
		}
	}
	return e, out, reason, true
}

// Freed untracks a request this replica routed that ended (its client
// freed it or left, or a peer freed it) and its prefill hop: a client that
// frees a disaggregated request, or leaves, frees both. It returns the
// hop's id and entry when the hop was still tracked (its own answer had
// not freed it): the owner frees it on its rank and gossips it.
func Freed(t *tracking.Table, requestID string) (hop string, e tracking.Entry, ok bool) {
	t.Untrack(requestID)
	if strings.HasSuffix(requestID, scheduling.PrefillRequestSuffix) {
		return "", tracking.Entry{}, false
	}
	hop = scheduling.PrefillRequestID(requestID)
	e, ok = t.Untrack(hop)
	return hop, e, ok
}

// SessionEvent is a table entry as gossip carries it.
func SessionEvent(e sessions.Entry) *messages.SequenceEvent {
	if e.Ended {
		return &messages.SequenceEvent{Data: &messages.SequenceEvent_SessionEnded{SessionEnded: &messages.SessionEnded{
			SessionId: e.ID, Stamp: e.Version.Stamp, Writer: e.Version.Writer, LastUsedUnixNano: e.LastUsed, Worker: RankMsg(e.Worker),
		}}}
	}
	return &messages.SequenceEvent{Data: &messages.SequenceEvent_SessionBound{SessionBound: &messages.SessionBound{
		SessionId: e.ID, Worker: RankMsg(e.Worker), Stamp: e.Version.Stamp, Writer: e.Version.Writer, LastUsedUnixNano: e.LastUsed,
	}}}
}

// SessionEntry reads a gossiped session write (false: not one).
func SessionEntry(ev *messages.SequenceEvent) (sessions.Entry, bool) {
	switch d := ev.GetData().(type) {
	case *messages.SequenceEvent_SessionBound:
		b := d.SessionBound
		if b == nil || b.Worker == nil {
			return sessions.Entry{}, false
		}
		return sessions.Entry{ID: b.SessionId, Worker: RankOf(b.Worker),
			Version: sessions.Version{Stamp: b.Stamp, Writer: b.Writer}, LastUsed: b.LastUsedUnixNano}, true
	case *messages.SequenceEvent_SessionEnded:
		x := d.SessionEnded
		if x == nil {
			return sessions.Entry{}, false
		}
		return sessions.Entry{ID: x.SessionId, Worker: RankOf(x.Worker), Ended: true,
			Version: sessions.Version{Stamp: x.Stamp, Writer: x.Writer}, LastUsed: x.LastUsedUnixNano}, true
	}
	return sessions.Entry{}, false
}

// IsSessionEvent tells session writes apart from request lifecycle
// events in a peer's stream.
func IsSessionEvent(ev *messages.SequenceEvent) bool {
	switch ev.GetData().(type) {
	case *messages.SequenceEvent_SessionBound, *messages.SequenceEvent_SessionEnded:
		return true
	}
	return false
}
