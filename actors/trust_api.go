package actors

import (
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/trust"
)

// The Router's index-trust entry points. Event sources report what they
// see on a rank's stream (trust.StreamObserver), the proxy reports parity
// (trust.ParityObserver), and readers get a rank's state without asking
// an actor. With trust off (or in approximate mode) reports are dropped
// and every rank is exact.

var (
	_ trust.StreamObserver = (*Router)(nil)
	_ trust.ParityObserver = (*Router)(nil)
)

func (r *Router) sendTrust(msg any) {
	if r.trust == nil || r.stopped.Load() {
		return
	}
	r.system.Root.Send(r.trust, msg)
}

// GapOpened reports lost events on a rank's stream (an event-id or
// sequence gap).
func (r *Router) GapOpened(w kv.WorkerWithDpRank, missed uint64) {
	r.sendTrust(trustStream{rank: w, kind: "gap", missed: missed, at: time.Now().UnixNano()})
}

// ReplayCompleted reports a replay that filled every hole of a rank's
// stream.
func (r *Router) ReplayCompleted(w kv.WorkerWithDpRank) {
	r.sendTrust(trustStream{rank: w, kind: "replay_ok", at: time.Now().UnixNano()})
}

// ReplayFailed reports a replay that failed or left holes.
func (r *Router) ReplayFailed(w kv.WorkerWithDpRank, reason string) {
	r.sendTrust(trustStream{rank: w, kind: "replay_failed", detail: reason, at: time.Now().UnixNano()})
}

// ObserveParity reports one served request: the cached prompt tokens the
// router predicted on w and those the engine confirmed.
func (r *Router) ObserveParity(w kv.WorkerWithDpRank, predicted, confirmed int, now time.Time) {
	r.sendTrust(trustParity{rank: w, predicted: predicted, confirmed: confirmed, at: now.UnixNano()})
}

// IndexTrust is w's trust as last published (exact for a rank the trust
// actor has no verdict on).
func (r *Router) IndexTrust(w kv.WorkerWithDpRank) RankTrust {
	if snap := r.trustSnap.Load(); snap != nil {
		if t, ok := snap.ranks[w]; ok {
			return t
		}
	}
	return RankTrust{State: trust.Exact.String()}
}

// IndexTrustTransitions counts trust changes by "state/reason".
func (r *Router) IndexTrustTransitions() map[string]uint64 {
	snap := r.trustSnap.Load()
	if snap == nil {
		return nil
	}
	out := make(map[string]uint64, len(snap.transitions))
	for k, n := range snap.transitions {
		out[k[0]+"/"+k[1]] = n
	}
	return out
}
