package actors

import (
	"sync/atomic"
	"time"
)

// tickGate lets the scheduler say whether it needs housekeeping soon. Its
// tick exists for work with a deadline: decisions waiting for replies
// (their timeout) and requests waiting in the queue (their expiry and
// retry). With neither, a tick every TickInterval only woke two goroutines
// fifty times a second; an idle replica spent most of its CPU on that
// (10 ms of CPU per second, measured; 2 ms/s without it). So the ticker
// runs at TickInterval while the scheduler is busy and once per idleTick
// otherwise (the session expiry and the queue gauge need no more).
//
// The scheduler writes busy after each message; turning busy wakes a
// ticker that is waiting out an idle period, so a deadline is never
// checked later than one TickInterval after it was set.
type tickGate struct {
	busy atomic.Bool
	wake chan struct{} // capacity 1: a pending wake is never lost or doubled
}

// idleTick is the housekeeping period of an idle scheduler.
const idleTick = time.Second

func newTickGate() *tickGate { return &tickGate{wake: make(chan struct{}, 1)} }

// set records whether the scheduler has deadlines to watch. Called by the
// scheduler only, after every message: the common cases (still busy, still
// idle) are one atomic load.
func (g *tickGate) set(busy bool) {
	if g.busy.Load() == busy {
		return
	}
	g.busy.Store(busy)
	if busy {
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}

// period is how long the ticker waits before the next tick.
func (g *tickGate) period(fast time.Duration) time.Duration {
	if g.busy.Load() {
		return fast
	}
	return max(fast, idleTick)
}
