package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/messages"
)

// freed untracks a request that ended and its prefill hop
// (decide.Freed), and frees and gossips the hop if it was still tracked.
func (s *schedulerActor) freed(ctx actor.Context, requestID string) {
	hop, e, ok := decide.Freed(s.local, requestID)
	if !ok {
		return
	}
	if pid := s.ranks.pids[e.Rank]; pid != nil {
		s.gossip.step(ctx, pid, &messages.RequestLifecycle{RequestId: hop,
			Step: &messages.RequestLifecycle_Free{Free: &messages.FreeRequest{RequestId: hop}}})
	}
}
