package actors

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/sequence"
	"github.com/kvrouter/kvrouter/tracking"
)

// Route calls are idempotent per request_id across replicas: a client
// (or a load balancer replaying its call) that lost the answer because
// the replica that routed it died sends the same request_id to another
// replica, which decides it again. The new decision replaces the dead
// replica's record everywhere, so the request is counted once:
//
//   - on the replica that decided again, the replication edge releases
//     the peer's record (releaseRetried, on the scheduler's
//     decide.TakeOver effect), and a rank holding it under the
//     peer's origin frees it (releaseFrom) unless the new decision has
//     already replaced it there;
//   - on a rank, an add of an id active under a peer's origin replaces
//     it (sequence.TakeOver); this replica's own record is never
//     replaced by a peer's add;
//   - on every other replica, a peer's add of an id tracked under another
//     origin on another rank frees it there first (tracking.Moved).
//
// These messages are local Go values, never gossiped.

// releaseRetried tells the replication edge that this replica routed id
// (again): a peer's record of it is released.
type releaseRetried struct{ id string }

// releaseFrom frees id on a rank only if origin holds it there.
type releaseFrom struct{ id, origin string }

// releaseRetried forgets a peer's record of a request this replica has
// just routed again, and frees it on the rank it was counted on.
func (a *replicationActor) releaseRetried(ctx actor.Context, m *releaseRetried) {
	e, ok := a.remote.Release(m.id, a.cfg.ReplicaID)
	if !ok {
		return
	}
	if pid := a.ranks.pids[e.Rank]; pid != nil {
		ctx.Send(pid, &releaseFrom{id: m.id, origin: e.Origin})
	}
	a.log.Debug("released a peer's record of a request routed again here", "request", m.id, "origin", e.Origin)
}

// movedFree is the free a peer's add implies for the rank a request was
// tracked on before (tracking.Moved), or nil.
func (a *replicationActor) movedFree(c tracking.Change) (kv.WorkerWithDpRank, *messages.SequenceEvent) {
	from, ok := a.remote.Moved(c)
	if !ok {
		return kv.WorkerWithDpRank{}, nil
	}
	prev, _ := a.remote.Lookup(c.RequestID)
	return from, &messages.SequenceEvent{Origin: prev.Origin,
		Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: c.RequestID}}}
}

// takeOver records an add on this rank, replacing a peer's record of the
// same id (sequence.TakeOver).
func (a *sequenceActor) takeOver(m *messages.AddRequest, origin string) {
	r := requestOf(m, origin)
	if origin == a.replica {
		// Only the replica that routed a request leases it; peers free
		// it when that replica's free (or expiry) reaches them.
		cfg := a.seqs.Config()
		r.Lease = cfg.Lease.For(r.ISL, r.ExpectedOutputTokens, cfg.ExpiryDuration)
	}
	took, err := a.seqs.TakeOver(r, time.Now(), a.replica)
	switch {
	case err != nil && !errors.Is(err, sequence.ErrDuplicateRequest):
		a.log.Warn("add request rejected", "request", m.RequestId, "origin", origin, "err", err)
	case took:
		a.log.Debug("request routed again replaced a peer's record", "request", m.RequestId, "origin", origin)
	}
}

// release applies a releaseFrom.
func (a *sequenceActor) release(m *releaseFrom) {
	if err := a.seqs.FreeFrom(m.id, m.origin); err != nil && !errors.Is(err, sequence.ErrOtherOrigin) {
		a.check("release", m.id, err)
	}
}
