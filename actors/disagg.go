package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/messages"
)

// freeCompanion frees the prefill hop of a request that was freed (a
// client that frees a disaggregated request, or leaves, frees both), and
// gossips it. A hop freed already (its answer arrived) is not tracked.
func (s *schedulerActor) freeCompanion(ctx actor.Context, requestID string) {
	id, ok := decide.PrefillHop(requestID)
	if !ok {
		return
	}
	e, ok := s.local.Lookup(id)
	if !ok {
		return
	}
	s.local.Untrack(id)
	if pid := s.ranks.pids[e.Rank]; pid != nil {
		s.gossip.step(ctx, pid, &messages.RequestLifecycle{RequestId: id,
			Step: &messages.RequestLifecycle_Free{Free: &messages.FreeRequest{RequestId: id}}})
	}
}
