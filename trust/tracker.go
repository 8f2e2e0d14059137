package trust

import (
	"fmt"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// Transition is one rank's change of state and what caused it.
type Transition struct {
	Rank     kv.WorkerWithDpRank
	From, To State
	Reason   string
}

// rankState is everything the rules remember about one rank.
type rankState struct {
	state  State
	reason string // the cause of the current state (last transition's)
	// detail qualifies the last evidence recorded (a refusal's reason, a
	// failed replay's, the events a gap lost), for operators.
	detail string

	// routedSince is when the rank was first sent work owing events
	// (Routed) after its last KV event (zero: none since).
	routedSince time.Time
	lastEvent   time.Time

	gapSince       time.Time // zero: no gap open
	gapUnrepaired  bool      // latched: a gap outlived GapGrace
	replayFailed   bool      // latched
	stale          bool      // latched until events resume with no gap
	refused        []time.Time
	refusedLatched bool

	// Parity: the current window's sums, and the last full window's level.
	parityN         int
	parityPredicted int64
	parityMissed    int64
	parityLevel     State
}

// level is the state the rank's causes add up to.
func (r *rankState) level() (State, string) {
	switch {
	case r.replayFailed:
		return Untrusted, ReasonReplayFailed
	case r.gapUnrepaired:
		return Untrusted, ReasonGapUnrepaired
	case r.stale:
		return Untrusted, ReasonStale
	case r.refusedLatched:
		return Untrusted, ReasonRefused
	case r.parityLevel == Untrusted:
		return Untrusted, ReasonParityDrift
	case !r.gapSince.IsZero():
		return Degraded, ReasonGapOpen
	case len(r.refused) > 0:
		return Degraded, ReasonRefused
	case r.parityLevel == Degraded:
		return Degraded, ReasonParityDrift
	}
	return Exact, ""
}

// restore forgets every cause: the rank's index is exact again.
func (r *rankState) restore() {
	*r = rankState{state: r.state, lastEvent: r.lastEvent}
}

// Tracker holds every known rank's trust. Ranks not known (SetRanks) are
// exact and their inputs are ignored: a rank must be registered to be
// routed, and unregistered workers' events never reach the index.
// Not safe for concurrent use: one actor owns it.
type Tracker struct {
	cfg   Config
	ranks map[kv.WorkerWithDpRank]*rankState
}

// New returns a tracker with no ranks.
func New(cfg Config) *Tracker {
	return &Tracker{cfg: cfg, ranks: map[kv.WorkerWithDpRank]*rankState{}}
}

// Config returns the thresholds in force.
func (t *Tracker) Config() Config { return t.cfg }

// SetRanks makes list the known ranks: new ones start exact, ranks no
// longer listed are forgotten (a worker that registers again starts
// exact: its engine announces a clear when it restarts).
func (t *Tracker) SetRanks(list []kv.WorkerWithDpRank) {
	keep := make(map[kv.WorkerWithDpRank]bool, len(list))
	for _, w := range list {
		keep[w] = true
		if t.ranks[w] == nil {
			t.ranks[w] = &rankState{}
		}
	}
	for w := range t.ranks {
		if !keep[w] {
			delete(t.ranks, w)
		}
	}
}

// State returns a rank's state and its cause ("" when exact).
func (t *Tracker) State(w kv.WorkerWithDpRank) (State, string) {
	if r := t.ranks[w]; r != nil {
		return r.state, r.reason
	}
	return Exact, ""
}

// Detail is the last evidence recorded against w ("" when exact).
func (t *Tracker) Detail(w kv.WorkerWithDpRank) string {
	if r := t.ranks[w]; r != nil && r.state != Exact {
		return r.detail
	}
	return ""
}

// NotExact returns every rank that is degraded or untrusted, with its
// state: what the actor publishes (exact is everyone else).
func (t *Tracker) NotExact() map[kv.WorkerWithDpRank]State {
	out := map[kv.WorkerWithDpRank]State{}
	for w, r := range t.ranks {
		if r.state != Exact {
			out[w] = r.state
		}
	}
	return out
}

// settle recomputes a rank's state and reports the change, if any.
// restoredBy names the restoring input when the new level is lower
// because an input lifted its causes.
func (t *Tracker) settle(w kv.WorkerWithDpRank, r *rankState, now time.Time, restoredBy string, out []Transition) []Transition {
	to, why := r.level()
	if to == r.state {
		if to != Exact && why != r.reason && to == Untrusted {
			r.reason = why // the cause that now holds it
		}
		return out
	}
	if to < r.state && restoredBy != "" {
		why = restoredBy
	}
	out = append(out, Transition{Rank: w, From: r.state, To: to, Reason: why})
	r.state, r.reason = to, why
	if to == Exact {
		r.reason = ""
	}
	return out
}

// Routed notes that w was sent work at now that owes KV events (its
// engine must store blocks).
func (t *Tracker) Routed(w kv.WorkerWithDpRank, now time.Time) {
	if r := t.ranks[w]; r != nil && r.routedSince.IsZero() {
		r.routedSince = now
	}
}

// EventSeen notes that a KV event of w arrived at (applied or refused:
// the stream is alive either way). Requests routed before it no longer
// count toward staleness. Events resuming on a stale rank lift the stale
// cause unless a gap is open or latched (then the stream lost events).
func (t *Tracker) EventSeen(w kv.WorkerWithDpRank, at time.Time) []Transition {
	r := t.ranks[w]
	if r == nil {
		return nil
	}
	if at.After(r.lastEvent) {
		r.lastEvent = at
	}
	if !r.routedSince.IsZero() && !r.routedSince.After(at) {
		r.routedSince = time.Time{}
	}
	if r.stale && r.gapSince.IsZero() && !r.gapUnrepaired {
		r.stale = false
		return t.settle(w, r, at, ReasonResumed, nil)
	}
	return nil
}

// GapOpened notes an event-id gap on w's stream (events lost). It is
// degraded until a replay completes or a clear arrives, untrusted once
// the gap is older than GapGrace (Tick).
func (t *Tracker) GapOpened(w kv.WorkerWithDpRank, missed uint64, now time.Time) []Transition {
	r := t.ranks[w]
	if r == nil {
		return nil
	}
	if r.gapSince.IsZero() {
		r.gapSince = now
	}
	r.detail = fmt.Sprintf("%d events lost", missed)
	return t.settle(w, r, now, "", nil)
}

// ReplayCompleted notes a replay that filled every hole of w's stream:
// the rank is exact again.
func (t *Tracker) ReplayCompleted(w kv.WorkerWithDpRank, now time.Time) []Transition {
	return t.restore(w, now, ReasonReplayDone)
}

// Cleared notes that w's cache was cleared (all blocks removed, or the
// engine restarted): what the index holds for it from now on is what
// the engine announces, so it is exact.
func (t *Tracker) Cleared(w kv.WorkerWithDpRank, now time.Time) []Transition {
	return t.restore(w, now, ReasonCleared)
}

func (t *Tracker) restore(w kv.WorkerWithDpRank, now time.Time, why string) []Transition {
	r := t.ranks[w]
	if r == nil {
		return nil
	}
	r.restore()
	return t.settle(w, r, now, why, nil)
}

// ReplayFailed notes a replay that failed, timed out or could not reach
// back far enough: the rank is untrusted.
func (t *Tracker) ReplayFailed(w kv.WorkerWithDpRank, why string, now time.Time) []Transition {
	r := t.ranks[w]
	if r == nil {
		return nil
	}
	r.replayFailed = true
	r.detail = why
	return t.settle(w, r, now, "", nil)
}

// Refused notes an event of w the index refused (reason: the drop's
// label). Refusals that cannot make the index claim blocks the engine
// lacks (a removal of a block not held) are not counted.
func (t *Tracker) Refused(w kv.WorkerWithDpRank, reason string, now time.Time) []Transition {
	r := t.ranks[w]
	if r == nil || !Counts(reason) {
		return nil
	}
	r.refused = append(trimBefore(r.refused, now.Add(-t.cfg.RefusedWindow)), now)
	r.detail = reason
	if len(r.refused) >= t.cfg.RefusedUntrusted {
		r.refusedLatched = true
	}
	return t.settle(w, r, now, "", nil)
}

// Counts reports whether a refusal reason counts against a rank's trust.
// A Removed naming a block the rank does not hold leaves the index with
// fewer blocks than the engine, never more: no false hit follows.
func Counts(reason string) bool { return reason != "block_not_found" && reason != "" }

// trimBefore drops the times before limit (the slice is in time order).
func trimBefore(ts []time.Time, limit time.Time) []time.Time {
	i := 0
	for i < len(ts) && ts[i].Before(limit) {
		i++
	}
	if i == 0 {
		return ts
	}
	return slices.Delete(ts, 0, i)
}

// Tick applies the time-based rules at now: gaps past GapGrace, stale
// streams, refusals aging out of their window.
func (t *Tracker) Tick(now time.Time) []Transition {
	var out []Transition
	for w, r := range t.ranks {
		if !r.gapSince.IsZero() && now.Sub(r.gapSince) >= t.cfg.GapGrace {
			r.gapUnrepaired = true
		}
		if !r.routedSince.IsZero() && now.Sub(r.routedSince) >= t.cfg.StaleAfter && !r.stale {
			r.stale = true
			r.detail = fmt.Sprintf("no event for %s while serving", now.Sub(r.routedSince).Round(time.Second))
		}
		quiet := ""
		if n := len(r.refused); n > 0 {
			r.refused = trimBefore(r.refused, now.Add(-t.cfg.RefusedWindow))
			if len(r.refused) == 0 {
				quiet = ReasonRefusedQuiet
			}
		}
		out = t.settle(w, r, now, quiet, out)
	}
	slices.SortFunc(out, func(a, b Transition) int { return kv.CompareRanks(a.Rank, b.Rank) })
	return out
}

// ObserveParity judges the router's prediction for one request served by
// w against the engine's answer: predicted is the cached prompt tokens
// the router counted on (from whichever index scored the rank),
// confirmed what the engine reported cached. Requests with no predicted
// hit say nothing about false hits and are not counted. Every
// ParityWindow counted requests the window's false-hit fraction
// (sum of max(predicted-confirmed, 0) over sum of predicted) sets the
// parity level; a clean window restores the rank.
func (t *Tracker) ObserveParity(w kv.WorkerWithDpRank, predicted, confirmed int, now time.Time) []Transition {
	r := t.ranks[w]
	if r == nil || predicted <= 0 {
		return nil
	}
	r.parityN++
	r.parityPredicted += int64(predicted)
	r.parityMissed += int64(max(predicted-max(confirmed, 0), 0))
	if r.parityN < t.cfg.ParityWindow {
		return nil
	}
	miss := float64(r.parityMissed) / float64(r.parityPredicted)
	r.detail = fmt.Sprintf("%.0f%% of predicted cached tokens unconfirmed", 100*miss)
	r.parityN, r.parityPredicted, r.parityMissed = 0, 0, 0
	switch {
	case miss > t.cfg.ParityUntrusted:
		r.parityLevel = Untrusted
	case miss <= t.cfg.ParityClean:
		r.restore()
		return t.settle(w, r, now, ReasonCleanParity, nil)
	case r.parityLevel == Untrusted:
		// Untrusted latches: only a clean window lifts it.
	case miss > t.cfg.ParityDegraded:
		r.parityLevel = Degraded
	default:
		r.parityLevel = Exact
		return t.settle(w, r, now, ReasonParityOK, nil)
	}
	return t.settle(w, r, now, "", nil)
}
