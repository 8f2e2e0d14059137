package sessions

import (
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/scheduling"
)

// MoveReason says why a session left its rank (a metric label).
type MoveReason string

const (
	// MoveGone: the rank is unregistered, unhealthy or draining.
	MoveGone MoveReason = "gone"
	// MoveBusy: the engine reports the rank busy (scheduling.EngineBusy
	// made it WorkerBusy), or its prefill backlog is over the router's
	// queue threshold (scheduling.Overloaded).
	MoveBusy MoveReason = "busy"
	// MoveExcluded: the request's own constraints (pinned worker,
	// allowed workers, a proxy retry avoiding an unreachable worker)
	// leave the rank out.
	MoveExcluded MoveReason = "excluded"
)

// BoundRank is what the scheduler knows of a session's bound rank when it
// routes the session's next request.
type BoundRank struct {
	Registered bool           // the rank is in the registry
	State      kv.WorkerState // its state (scheduling.Routable decides)
	Eligible   bool           // it passed the request's constraints
	Overloaded bool           // scheduling.Overloaded on its current load
}

// Stay is the sticky rule: a session's request goes to its bound rank
// unless the rank is gone or over the busy threshold (the same rules the
// scheduler applies to every candidate); otherwise it is routed normally
// and the session moves, for the returned reason.
func Stay(b BoundRank) (bool, MoveReason) {
	switch {
	case !b.Registered:
		return false, MoveGone
	case !scheduling.Routable(b.State, false):
		if b.State == kv.WorkerBusy {
			return false, MoveBusy
		}
		return false, MoveGone
	case !b.Eligible:
		return false, MoveExcluded
	case b.Overloaded:
		return false, MoveBusy
	}
	return true, ""
}
