package actors

import (
	"math"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sessions"
)

// decideDisaggregated routes a request in a fleet with prefill and
// decode pools (scheduling.SelectDisaggregated). A remote prefill is two
// tracked requests: the prefill hop on the prefill rank (its uncached
// prompt as prefill load, one output token) under
// scheduling.PrefillRequestID, freed when its answer arrives; and the
// request itself on the decode rank, holding the prompt's blocks with no
// prefill load of its own (Dynamo's decode router tracks no prefill).
// Both are gossiped like any add, so peers see both pools' loads. A
// local prefill is one request on the decode rank, as in an aggregated
// fleet.
func (s *schedulerActor) decideDisaggregated(ctx actor.Context, p *pending, cfg scheduling.Config,
	cands []scheduling.Candidate, now time.Time) {
	isl := len(p.req.TokenIds)
	// A sticky session binds the decode rank: the conversation's KV keeps
	// landing there (and later turns are short enough to prefill locally).
	var bound *kv.WorkerWithDpRank
	if p.hasSticky && !s.ranks.role(p.sticky).Decodes() {
		p.moveReason, p.hasSticky = sessions.MoveGone, false // no longer a decode worker
	}
	if sticky := s.stickyCandidates(p, cfg, cands); sticky != nil {
		bound = &sticky[0].Worker
	}
	dd, err := scheduling.SelectDisaggregatedBound(cfg, s.cfg.BlockSize, isl, len(p.local), cands, bound, s.ranks.role, s.rng)
	s.obs.DecisionPhase("select", time.Since(now))
	if err != nil {
		s.obs.Decision("no_worker", 0, len(p.local))
		ctx.Send(p.replyTo, routeErr(messages.RouteErrorCode_ROUTE_ERROR_NO_ELIGIBLE_WORKER, "%v", err))
		return
	}
	d := dd.Decode
	reply := &messages.RouteReply{Worker: rankMsg(d.Worker), OverlapBlocks: d.OverlapBlocks, CachedTokens: d.CachedTokens}
	if dd.Prefill != nil {
		pf := *dd.Prefill
		reply.PrefillWorker = rankMsg(pf.Worker)
		reply.PrefillOverlapBlocks, reply.PrefillCachedTokens = pf.OverlapBlocks, pf.CachedTokens
		reply.PrefillRequestId = scheduling.PrefillRequestID(p.req.RequestId)
	}
	outcome := "query"
	if p.req.UpdateStates {
		outcome = "routed"
		s.recordSession(p, d.Worker, now)
		if dd.Prefill != nil {
			s.record(ctx, p, *dd.Prefill, cfg, newBlocksOf(cands, dd.Prefill.Worker), hop{
				id: reply.PrefillRequestId, trackPrefill: cfg.TrackPrefillTokens, expectedOutput: 1, token: p.req.CancelToken})
			// The decode rank receives the blocks: none of the prompt is
			// prefill load there, all of it is active blocks.
			s.record(ctx, p, d, cfg, newBlocksOf(cands, d.Worker), hop{
				id: p.req.RequestId, expectedOutput: p.req.ExpectedOutputTokens, token: p.req.CancelToken})
		} else {
			s.record(ctx, p, d, cfg, newBlocksOf(cands, d.Worker), hop{id: p.req.RequestId,
				trackPrefill: cfg.TrackPrefillTokens, expectedOutput: p.req.ExpectedOutputTokens, token: p.req.CancelToken})
		}
	}
	s.obs.Decision(outcome, d.OverlapBlocks, len(p.local))
	if p.req.UpdateStates && (p.shared > 0 || cfg.SharedCacheMultiplier > 0) {
		prefilled := d // the rank that computes the prompt
		if dd.Prefill != nil {
			prefilled = *dd.Prefill
		}
		s.obs.SharedCache(p.shared, scheduling.SharedBeyondDevice(uint32(math.Round(prefilled.EffectiveOverlapBlocks)), p.shared), len(p.local))
	}
	s.obs.Disaggregation(dd.Why)
	s.obs.DecisionPhase("total", time.Since(p.started))
	ctx.Send(p.replyTo, reply)
}

// freeCompanion frees the prefill hop of a request that was freed (a
// client that frees a disaggregated request, or leaves, frees both), and
// gossips it. A hop freed already (its answer arrived) is not tracked.
func (s *schedulerActor) freeCompanion(ctx actor.Context, requestID string) {
	if strings.HasSuffix(requestID, scheduling.PrefillRequestSuffix) {
		return
	}
	id := scheduling.PrefillRequestID(requestID)
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
