// Package trust decides, per (worker, dp_rank), how far the router's KV
// event index can be believed for that rank: exact, degraded or
// untrusted. It is pure: no goroutines, no clock (every input carries
// its time), no network. An actor feeds it what the event sources, the
// shards, the scheduler and the proxy see, and publishes its verdicts.
//
// The rules (docs/index-trust.md):
//
//   - exact: nothing says the index differs from the engine's cache.
//   - degraded: evidence of divergence that may heal by itself: an
//     event-id gap waiting for its replay, refused events within the
//     refused window, or a parity window whose false-hit fraction is over
//     ParityDegraded. Still scored from the index; shown everywhere.
//   - untrusted: the index is known or presumed wrong: a failed replay, a
//     gap not repaired within GapGrace, RefusedUntrusted refused events
//     within one window, a stale stream (no event for StaleAfter after
//     the rank was sent work that makes its engine store blocks), or a
//     parity window over
//     ParityUntrusted. Scored from predicted blocks (approximate mode's
//     rule) instead of the index.
//
// Untrusted latches: a completed replay, a clear of the rank, or a clean
// parity window (false hits at most ParityClean) restores exact. A stale
// stream is only a suspicion: when events resume with no gap in their
// ids, that cause alone is lifted.
package trust

import "fmt"

// State is a rank's trust level; a higher value is less trusted.
type State uint8

const (
	Exact State = iota
	Degraded
	Untrusted
)

func (s State) String() string {
	switch s {
	case Exact:
		return "exact"
	case Degraded:
		return "degraded"
	case Untrusted:
		return "untrusted"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// States lists every state, for exporting one gauge series per state.
var States = []State{Exact, Degraded, Untrusted}

// Reasons a rank changes state (the transitions counter's label).
const (
	ReasonGapOpen       = "gap_open"        // an event-id gap, awaiting its repair
	ReasonGapUnrepaired = "gap_unrepaired"  // the gap outlived GapGrace
	ReasonReplayFailed  = "replay_failed"   // a replay failed or left holes
	ReasonRefused       = "refused_events"  // events refused by the index
	ReasonStale         = "stale_stream"    // work owing events, none for StaleAfter
	ReasonParityDrift   = "parity_drift"    // predicted hits the engine did not confirm
	ReasonReplayDone    = "replay_complete" // restored: a replay completed
	ReasonCleared       = "cleared"         // restored: the rank's cache was cleared
	ReasonCleanParity   = "clean_parity"    // restored: a clean parity window
	ReasonResumed       = "stream_resumed"  // stale lifted: events resumed with no gap
	ReasonRefusedQuiet  = "refused_quiet"   // refused-events degradation aged out
	ReasonParityOK      = "parity_ok"       // parity degradation lifted by a window under ParityDegraded
)
