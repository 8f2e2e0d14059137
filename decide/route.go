package decide

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sessions"
)

// ErrTokensEmpty: a route request without prompt tokens. The APIs and
// the scheduler share this one rule.
var ErrTokensEmpty = errors.New("token_ids must not be empty")

// CheckTokens is the "tokens present" rule of a route request.
func CheckTokens(tokens []uint32) error {
	if len(tokens) == 0 {
		return ErrTokensEmpty
	}
	return nil
}

// RouteErr builds a route call's error answer.
func RouteErr(code messages.RouteErrorCode, format string, args ...any) *messages.RouteError {
	return &messages.RouteError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// RankOf and RankMsg convert a worker rank to and from its message.
func RankOf(m *messages.WorkerRank) kv.WorkerWithDpRank {
	return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(m.GetWorkerId()), DpRank: m.GetDpRank()}
}

// RankMsg is RankOf's inverse.
func RankMsg(w kv.WorkerWithDpRank) *messages.WorkerRank {
	return &messages.WorkerRank{WorkerId: uint64(w.WorkerID), DpRank: w.DpRank}
}

// OverrideOf reads a request's router_config_override.
func OverrideOf(o *messages.RouterConfigOverride) *scheduling.Override {
	if o == nil {
		return nil
	}
	return &scheduling.Override{
		OverlapScoreWeight: o.OverlapScoreWeight,
		RouterTemperature:  o.RouterTemperature,
		OverlapScoreCredit: o.OverlapScoreCredit,
		PrefillLoadScale:   o.PrefillLoadScale,
		TrackPrefillTokens: o.TrackPrefillTokens,
		AssumeKVReuse:      o.AssumeKvReuse,

		SharedCacheMultiplier: o.SharedCacheMultiplier,
	}
}

// planSession reads a session's binding as a decision starts: a bound
// rank that is registered, routable and eligible becomes the decision's
// sticky rank (its load is checked once the replies are in); otherwise
// the reason the session will move is noted.
func planSession(p *Plan, r *Ranks, s SessionAnswer, now time.Time) {
	p.SessionBound = true
	p.SessionAge = time.Duration(now.UnixNano() - s.LastUsed)
	w := s.Worker
	stay, reason := sessions.Stay(sessions.BoundRank{
		Registered: r.Has(w), State: r.States[w], Eligible: slices.Contains(p.Eligible, w),
	})
	if stay {
		p.Sticky, p.HasSticky = w, true
	} else {
		p.MoveReason = reason
	}
}

// candidates completes the joined candidates: the decisions their loads
// do not show yet are folded in (Board.Unseen, scheduling.AddRouted), and
// decode blocks are zeroed when they are not tracked.
func (d *Decider) candidates(in *Decide) []scheduling.Candidate {
	cands := in.Candidates
	if unseen := d.board.Unseen(in.Loads); len(unseen) > 0 {
		scheduling.AddRouted(cands, in.Sampled, uint64(in.Blocks), d.cfg.Stride, unseen)
	}
	d.ZeroUntracked(cands)
	return cands
}

// ZeroUntracked zeroes the candidates' decode blocks when active blocks
// are not tracked (the cost then sees no decode load).
func (d *Decider) ZeroUntracked(cands []scheduling.Candidate) {
	if d.cfg.TrackActiveBlocks {
		return
	}
	for i := range cands {
		cands[i].ActiveBlocks, cands[i].NewBlocks = 0, 0
	}
}

// decide selects a worker rank for a request whose replies are in, or
// queues it when the admitter refuses it for now.
func (d *Decider) decide(now time.Time, in *Decide) []Effect {
	p, m := in.Plan, in.Req
	cfg := p.Config
	cands := d.candidates(in)
	p.BestCached = max(p.BestCached, scheduling.BestCacheHit(cfg, d.cfg.BlockSize, cands))
	d.ctx = Context{Config: cfg, BlockSize: d.cfg.BlockSize, ISL: len(m.TokenIds), Blocks: in.Blocks, Ranks: in.Ranks, Plan: p,
		Lora: m.LoraName, Now: now.UnixNano(), Adapters: &d.adapters}
	c := &d.ctx
	pipe := d.pipeline(m.Model)
	if m.UpdateStates && !pipe.Admitter.Admit(c, cands) {
		return d.park(now, in)
	}
	d.Forget(p, in.ID)
	var rc *Receipt
	if in.Explain {
		rc = newReceipt(now, m, p, in.Signals)
		c.Receipt = rc
	}
	if in.Ranks.Disaggregated() && m.PinnedWorker == nil {
		return d.decideDisaggregated(c, in, cands)
	}
	choose := cands
	for _, f := range pipe.Filters {
		choose = f.Filter(c, choose)
	}
	dec, closeCall, err := d.selectRank(c, pipe, cands, choose)
	if err != nil {
		return d.emitAnswer(Answer{Err: RouteErr(messages.RouteErrorCode_ROUTE_ERROR_NO_ELIGIBLE_WORKER, "%v", err),
			Outcome: "no_worker", Receipt: rc})
	}
	ans := Answer{Reply: &messages.RouteReply{Worker: RankMsg(dec.Worker), OverlapBlocks: dec.OverlapBlocks, CachedTokens: dec.CachedTokens},
		Outcome: "query", OverlapBlocks: dec.OverlapBlocks, Receipt: rc, Close: closeCall}
	if !m.UpdateStates {
		return d.emitAnswer(ans)
	}
	ans.Outcome = "routed"
	d.adapters.Routed(m.LoraName, dec.Worker, now.UnixNano())
	d.emitAdd(d.record(in, dec, newBlocksOf(cands, dec.Worker), m.RequestId, cfg.TrackPrefillTokens, m.ExpectedOutputTokens))
	if s, ok := sessionEffect(m, p, dec.Worker); ok {
		d.emitSession(s)
	}
	if in.Shared > 0 || cfg.SharedCacheMultiplier > 0 {
		// As Dynamo's find_best_match: hits_beyond(effective overlap
		// rounded) of the chosen worker.
		ans.SharedCache = &[2]uint32{in.Shared, scheduling.SharedBeyondDevice(uint32(math.Round(dec.EffectiveOverlapBlocks)), in.Shared)}
	}
	return d.emitAnswer(ans)
}

// selectRank scores cands with pipe's weighted scorers and picks one;
// closeCall reports whether the scores were within noise (IsClose).
func (d *Decider) selectRank(c *Context, pipe *Pipeline, all, cands []scheduling.Candidate) (dec scheduling.Decision, closeCall bool, err error) {
	if len(cands) == 0 {
		return scheduling.Decision{}, false, fmt.Errorf("select: %w", scheduling.ErrNoEligibleWorker)
	}
	costs, err := pipe.score(c, cands, d.costs)
	d.costs = costs
	if err != nil {
		return scheduling.Decision{}, false, fmt.Errorf("select: %w", err)
	}
	rng := d.rng
	var draws *drawRecorder
	if c.Receipt != nil {
		draws = &drawRecorder{src: d.rng}
		rng = rand.New(draws)
	}
	i := pipe.Picker.Pick(c, costs, rng)
	dec = scheduling.DecisionOf(*c.Config, c.BlockSize, &cands[i], costs[i], len(cands))
	closeCall = IsClose(costs)
	if c.Receipt != nil {
		c.Receipt.fill(c, *pipe, all, cands, costs, i, draws)
		c.Receipt.Close = closeCall
	}
	return dec, closeCall, nil
}

// CloseMargin is the noise of a cost: a decision is close when the
// runner-up's cost is within this fraction of its own magnitude of the
// best cost (or ties it). Costs come from loads and overlaps that are
// themselves up to a publication interval old, so a 1% edge is not a
// reason a rank won.
const CloseMargin = 0.01

// IsClose reports whether the two lowest of costs are within
// CloseMargin: runner-up − best ≤ CloseMargin × |runner-up|. One cost is
// never close (there was no choice).
func IsClose(costs []float64) bool {
	if len(costs) < 2 {
		return false
	}
	best, second := math.Inf(1), math.Inf(1)
	for _, v := range costs {
		switch {
		case v < best:
			best, second = v, best
		case v < second:
			second = v
		}
	}
	if math.IsInf(second, 1) {
		return false
	}
	return second-best <= CloseMargin*math.Abs(second)
}

func newBlocksOf(cands []scheduling.Candidate, w kv.WorkerWithDpRank) uint64 {
	for i := range cands { // by index: a candidate is ~100 bytes
		if cands[i].Worker == w {
			return cands[i].NewBlocks
		}
	}
	return 0
}

// record is the add of one hop of a routed request: its uncached prompt
// tokens on the chosen rank. Predicted blocks attract a request but are
// not in the engine's cache yet: it will prefill them, so they count as
// load.
func (d *Decider) record(in *Decide, dec scheduling.Decision, newBlocks uint64, id string, trackPrefill bool, expectedOutput uint64) RecordAdd {
	isl := uint64(len(in.Req.TokenIds))
	cached := dec.CachedTokens
	if in.Overlaps != nil {
		if confirmed, predicted := in.Overlaps.Predicted(dec.Worker); predicted {
			_, cached = scheduling.CacheHitEstimate(*in.Plan.Config, d.cfg.BlockSize, confirmed, 0, 0)
		}
	}
	r := RecordAdd{ID: id, Worker: dec.Worker, PrefillTokens: isl - min(cached, isl), TrackPrefill: trackPrefill,
		ExpectedOutput: expectedOutput, Token: in.Req.CancelToken, NewBlocks: newBlocks, OverlapBlocks: dec.OverlapBlocks, Isl: isl}
	routed := scheduling.Routed{Worker: r.Worker, NewBlocks: newBlocks, Hashes: in.Sampled}
	if trackPrefill {
		routed.PrefillTokens = r.PrefillTokens
	}
	d.board.Recorded(routed)
	return r
}

// sessionEffect is the session write of a routed request (none without
// a session).
func sessionEffect(m *messages.RouteRequest, p *Plan, w kv.WorkerWithDpRank) (Session, bool) {
	if m.SessionId == "" {
		return Session{}, false
	}
	return Session{ID: m.SessionId, Worker: w, WasBound: p.SessionBound, MoveReason: p.MoveReason}, true
}

// decideDisaggregated routes a request in a fleet with prefill and
// decode pools (scheduling.SelectDisaggregatedBound). A remote prefill is
// two tracked requests: the prefill hop on the prefill rank (its
// uncached prompt as prefill load, one output token) under
// scheduling.PrefillRequestID, freed when its answer arrives; and the
// request itself on the decode rank, holding the prompt's blocks with no
// prefill load of its own (Dynamo's decode router tracks no prefill).
// A local prefill is one request on the decode rank.
func (d *Decider) decideDisaggregated(c *Context, in *Decide, cands []scheduling.Candidate) []Effect {
	p, m, cfg := in.Plan, in.Req, c.Config
	// A sticky session binds the decode rank: the conversation's KV keeps
	// landing there (and later turns are short enough to prefill locally).
	var bound *kv.WorkerWithDpRank
	if p.HasSticky && !in.Ranks.Role(p.Sticky).Decodes() {
		p.MoveReason, p.HasSticky = sessions.MoveGone, false // no longer a decode worker
	}
	if sticky := (SessionAffinity{}).Filter(c, cands); len(sticky) == 1 && p.HasSticky {
		bound = &sticky[0].Worker
	}
	dd, err := scheduling.SelectDisaggregatedBound(*cfg, d.cfg.BlockSize, len(m.TokenIds), in.Blocks, cands, bound, in.Ranks.Role, d.rng)
	if err != nil {
		return d.emitAnswer(Answer{Err: RouteErr(messages.RouteErrorCode_ROUTE_ERROR_NO_ELIGIBLE_WORKER, "%v", err),
			Outcome: "no_worker", Receipt: c.Receipt})
	}
	dec := dd.Decode
	reply := &messages.RouteReply{Worker: RankMsg(dec.Worker), OverlapBlocks: dec.OverlapBlocks, CachedTokens: dec.CachedTokens}
	if dd.Prefill != nil {
		pf := *dd.Prefill
		reply.PrefillWorker = RankMsg(pf.Worker)
		reply.PrefillOverlapBlocks, reply.PrefillCachedTokens = pf.OverlapBlocks, pf.CachedTokens
		reply.PrefillRequestId = scheduling.PrefillRequestID(m.RequestId)
	}
	ans := Answer{Reply: reply, Outcome: "query", OverlapBlocks: dec.OverlapBlocks, Disaggregation: dd.Why, Receipt: c.Receipt}
	if c.Receipt != nil {
		c.Receipt.fillDisagg(c, cands, in.Ranks.Role, dd)
	}
	if !m.UpdateStates {
		return d.emitAnswer(ans)
	}
	ans.Outcome = "routed"
	if s, ok := sessionEffect(m, p, dec.Worker); ok {
		d.emitSession(s)
	}
	if dd.Prefill != nil {
		d.emitAdd(d.record(in, *dd.Prefill, newBlocksOf(cands, dd.Prefill.Worker), reply.PrefillRequestId, cfg.TrackPrefillTokens, 1))
		// The decode rank receives the blocks: none of the prompt is
		// prefill load there, all of it is active blocks.
		d.emitAdd(d.record(in, dec, newBlocksOf(cands, dec.Worker), m.RequestId, false, m.ExpectedOutputTokens))
	} else {
		d.emitAdd(d.record(in, dec, newBlocksOf(cands, dec.Worker), m.RequestId, cfg.TrackPrefillTokens, m.ExpectedOutputTokens))
	}
	if in.Shared > 0 || cfg.SharedCacheMultiplier > 0 {
		prefilled := dec // the rank that computes the prompt
		if dd.Prefill != nil {
			prefilled = *dd.Prefill
		}
		ans.SharedCache = &[2]uint32{in.Shared, scheduling.SharedBeyondDevice(uint32(math.Round(prefilled.EffectiveOverlapBlocks)), in.Shared)}
	}
	return d.emitAnswer(ans)
}
