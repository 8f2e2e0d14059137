package actors

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sequence"
	"github.com/kvrouter/kvrouter/tracking"
	"github.com/kvrouter/kvrouter/trust"
)

func routeErr(code messages.RouteErrorCode, format string, args ...any) *messages.RouteError {
	return &messages.RouteError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// startRoute hashes the prompt once and fans it out to every shard and to
// the sequence actors of every eligible worker rank.
func (s *schedulerActor) startRoute(ctx actor.Context, m *messages.RouteRequest) {
	if len(m.TokenIds) == 0 {
		s.obs.Decision("bad_request", 0, 0)
		ctx.Respond(routeErr(messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST, "token_ids must not be empty"))
		return
	}
	if err := s.cfg.Limits.CheckRequest(len(m.TokenIds), m.RequestId); err != nil {
		s.obs.Decision("bad_request", 0, 0)
		ctx.Respond(routeErr(messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST, "%v", err))
		return
	}
	if m.UpdateStates {
		if strings.HasSuffix(m.RequestId, scheduling.PrefillRequestSuffix) {
			s.obs.Decision("bad_request", 0, 0)
			ctx.Respond(routeErr(messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST,
				"request_id %q ends in %q, the suffix of disaggregated prefill hops", m.RequestId, scheduling.PrefillRequestSuffix))
			return
		}
		if _, dup := s.local.Lookup(m.RequestId); dup {
			s.obs.Decision("bad_request", 0, 0)
			ctx.Respond(routeErr(messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST,
				"request_id %q is already active; free it first or use a new id", m.RequestId))
			return
		}
		if err := s.cfg.Limits.CheckAdmission(s.local.Len()); err != nil {
			s.obs.Decision("overloaded", 0, 0)
			s.obs.AdmissionRefused("active_requests")
			ctx.Respond(routeErr(messages.RouteErrorCode_ROUTE_ERROR_LIMIT, "%v", err))
			return
		}
		if err := s.cfg.Limits.CheckClient(m.Client, s.local.ClientActive(m.Client)); err != nil {
			s.refuseClient(ctx, m.Client, err)
			return
		}
	}
	if m.SessionId != "" {
		if err := s.sessions.CheckID(m.SessionId); err != nil {
			s.obs.Decision("bad_request", 0, 0)
			ctx.Respond(routeErr(messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST, "session_id: %v", err))
			return
		}
	}
	eligible, rerr := s.eligible(m.PinnedWorker, m.AllowedWorkerIds)
	if rerr != nil {
		s.obs.Decision("no_worker", 0, 0)
		ctx.Respond(rerr)
		return
	}
	p := s.newPending(ctx, kindRoute)
	p.req = m
	p.eligible = eligible
	if m.SessionId != "" {
		s.planSession(p, p.started)
	}
	if m.CancelToken != 0 {
		s.cancels[m.CancelToken] = p.id
	}
	s.hash(p, m.TokenIds, m.LoraName, s.cfg.Scheduling.WithOverride(overrideOf(m.RouterConfigOverride)).AssumeKVReuse)
	s.askShards(ctx, p)
	s.askLoads(ctx, p)
	s.maybeFinish(ctx, p) // no shards and no workers cannot happen, but stay safe
}

// hash computes a request's block hashes and its sampled sequence hashes,
// as the sequence actors and peers take them: one per
// router-active-sequence-stride blocks, in a slice of its own (messages are
// never shared with later mutation).
func (s *schedulerActor) hash(p *pending, tokens []uint32, lora string, assumeReuse bool) {
	p.local = hashing.AppendBlockHashes(s.takeLocal(), tokens, s.cfg.BlockSize, hashing.Options{LoraName: lora})
	p.blocks = len(p.local)
	stride := s.cfg.Sequence.EffectiveStride()
	p.sampled = make([]uint64, 0, sequence.SampledCount(p.blocks, stride))
	if assumeReuse {
		// Only the sampled hashes outlive the decision (the load queries,
		// the add and its gossip carry them): the whole chain is computed
		// in the scheduler's scratch.
		s.seqScratch = hashing.AppendSequenceHashes(s.seqScratch[:0], p.local)
		p.sampled = sequence.AppendSample(p.sampled, s.seqScratch, stride)
	} else {
		// Dynamo's router_assume_kv_reuse=false: every block is unique,
		// so nothing is deduplicated in the active-block count.
		for range cap(p.sampled) {
			p.sampled = append(p.sampled, s.rng.Uint64())
		}
	}
	p.hashed = time.Now()
	s.obs.DecisionPhase("hash", p.hashed.Sub(p.started))
}

// eligible applies the pinned-worker and allowed-workers constraints and
// the ranks' states (scheduling.EligibleRanks) to the registered ranks.
func (s *schedulerActor) eligible(pinned *messages.WorkerRank, allowed []uint64) ([]kv.WorkerWithDpRank, *messages.RouteError) {
	c := scheduling.Constraints{State: s.ranks.stateFunc()}
	if pinned != nil {
		w := rankOf(pinned)
		c.Pinned = &w
	}
	for _, id := range allowed {
		c.AllowedWorkerIDs = append(c.AllowedWorkerIDs, kv.WorkerID(id))
	}
	out, err := scheduling.EligibleRanks(s.ranks.list, c)
	if err != nil {
		return nil, routeErr(messages.RouteErrorCode_ROUTE_ERROR_NO_ELIGIBLE_WORKER, "%v", err)
	}
	// Unconstrained, out is the view's own slice: the next RankTable
	// replaces it but nothing mutates it.
	return out, nil
}

func overrideOf(o *messages.RouterConfigOverride) *scheduling.Override {
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

// candidates joins overlaps and loads for the eligible ranks: the reply
// of a rank asked (it shares the prompt's prefix), else its published load.
// The slice is the scheduler's scratch, valid until the next call: every
// caller uses it within the message it handles (64 candidates were a
// quarter of the bytes a decision allocated).
func (s *schedulerActor) candidates(p *pending, now time.Time) []scheduling.Candidate {
	cands := s.candScratch[:0]
	defer func() { s.candScratch = cands[:0] }()
	promptBlocks := uint64(p.blocks)
	nowUnixNano := now.UnixNano()
	entry := s.board.entries(s.ranks, p.eligible)
	for i, w := range p.eligible {
		// Filled in place: a candidate is ~150 bytes, and building it on
		// the stack and appending copied it once more per rank.
		cands = append(cands, scheduling.Candidate{Worker: w, NewBlocks: promptBlocks, SharedOverlap: p.shared})
		c := &cands[len(cands)-1]
		if o, ok := p.overlaps.next(w); ok {
			c.DeviceOverlap, c.HostOverlap, c.DiskOverlap = o.device, o.host, o.disk
		}
		l := p.loads[w]
		if l == nil {
			entry.at(i, w).fill(c, promptBlocks, nowUnixNano)
		} else {
			c.HasLoad = true
			c.ActivePrefillTokens = l.ActivePrefillTokens
			c.ActiveBlocks = l.ActiveBlocks
			c.NewBlocks = l.NewBlocks
			c.ActiveRequests = int(l.ActiveRequests)
			c.ActivePrefixBlocks = uint32(promptBlocks - min(l.NewBlocks, promptBlocks))
			c.HeadPrefillTokens = l.HeadPrefillTokens
			c.HeadPrefillElapsed = time.Duration(l.HeadPrefillElapsedNanos)
			c.PrefillTokensPerSec = l.PrefillTokensPerSec
		}
		c.CapacityBlocks = s.ranks.capacity[w]
		if !s.cfg.TrackActiveBlocks {
			c.ActiveBlocks, c.NewBlocks = 0, 0
		}
	}
	return cands
}

// decide selects a worker rank for a route request whose replies are in,
// or queues it when every eligible worker is over the queue threshold.
func (s *schedulerActor) decide(ctx actor.Context, p *pending) {
	now := time.Now()
	if p.scored.IsZero() {
		p.scored = now
		s.obs.DecisionPhase("score", now.Sub(p.hashed))
	}
	cfg := s.cfg.Scheduling.WithOverride(overrideOf(p.req.RouterConfigOverride))
	cands := s.candidates(p, now)
	if recent := s.routedUnseen(p); len(recent) > 0 {
		scheduling.AddRouted(cands, p.sampled, uint64(p.blocks), s.cfg.Sequence.EffectiveStride(), recent)
		if !s.cfg.TrackActiveBlocks {
			for i := range cands {
				cands[i].ActiveBlocks, cands[i].NewBlocks = 0, 0
			}
		}
	}
	p.bestCached = max(p.bestCached, scheduling.BestCacheHit(&cfg, s.cfg.BlockSize, cands))
	if p.req.UpdateStates && scheduling.AllOverloaded(cfg, cands, s.ranks.budgets) {
		s.enqueue(ctx, p, now)
		return
	}
	s.release(p)
	isl := len(p.req.TokenIds)
	if s.ranks.disaggregated() && p.req.PinnedWorker == nil {
		s.decideDisaggregated(ctx, p, cfg, cands, now)
		return
	}
	choose := cands
	if sticky := s.stickyCandidates(p, cfg, cands); sticky != nil {
		choose = sticky
	}
	d, err := scheduling.Select(cfg, s.cfg.BlockSize, isl, len(p.local), choose, s.rng)
	s.obs.DecisionPhase("select", time.Since(now))
	if err != nil {
		s.obs.Decision("no_worker", 0, len(p.local))
		ctx.Send(p.replyTo, routeErr(messages.RouteErrorCode_ROUTE_ERROR_NO_ELIGIBLE_WORKER, "%v", err))
		return
	}
	if p.req.UpdateStates {
		s.record(ctx, p, d, cfg, newBlocksOf(cands, d.Worker), hop{id: p.req.RequestId, trackPrefill: cfg.TrackPrefillTokens,
			expectedOutput: p.req.ExpectedOutputTokens, token: p.req.CancelToken})
		s.recordSession(p, d.Worker, now)
		s.obs.Decision("routed", d.OverlapBlocks, len(p.local))
		if p.shared > 0 || cfg.SharedCacheMultiplier > 0 {
			// As Dynamo's find_best_match: hits_beyond(effective overlap
			// rounded) of the chosen worker.
			s.obs.SharedCache(p.shared, scheduling.SharedBeyondDevice(uint32(math.Round(d.EffectiveOverlapBlocks)), p.shared), len(p.local))
		}
	} else {
		s.obs.Decision("query", d.OverlapBlocks, len(p.local))
	}
	s.obs.DecisionPhase("total", time.Since(p.started))
	ctx.Send(p.replyTo, &messages.RouteReply{
		Worker: rankMsg(d.Worker), OverlapBlocks: d.OverlapBlocks, CachedTokens: d.CachedTokens,
	})
}

func newBlocksOf(cands []scheduling.Candidate, w kv.WorkerWithDpRank) uint64 {
	for _, c := range cands {
		if c.Worker == w {
			return c.NewBlocks
		}
	}
	return 0
}

// hop is what one tracked request of a decision is: the whole request,
// or in a disaggregated fleet its prefill or decode half.
type hop struct {
	id             string
	trackPrefill   bool   // count its uncached prompt as prefill load
	expectedOutput uint64 // tokens it will generate (1 for a prefill hop)
	token          uint64 // cancel token (the client's call)
}

// record adds the routed request to its worker's active sequences (and,
// in approximate mode, predicts its blocks as cached there), and gossips.
func (s *schedulerActor) record(ctx actor.Context, p *pending, d scheduling.Decision, cfg scheduling.Config, newBlocks uint64, h hop) {
	isl := uint64(len(p.req.TokenIds))
	cached := d.CachedTokens
	if o, ok := p.overlaps.find(d.Worker); ok && o.predicted {
		// Predicted blocks attract the request but are not in the
		// engine's cache yet: it will prefill them, so they count as load.
		_, cached = scheduling.CacheHitEstimate(cfg, s.cfg.BlockSize, o.confirmed, 0, 0)
	}
	prefill := isl - min(cached, isl)
	add := &messages.AddRequest{
		RequestId: h.id, Worker: rankMsg(d.Worker), SequenceHashes: p.sampled,
		PromptBlocks: uint32(p.blocks), Stride: uint32(s.cfg.Sequence.EffectiveStride()),
		PrefillTokens: prefill, ExpectedOutputTokens: h.expectedOutput,
		TrackPrefillTokens: h.trackPrefill, Isl: isl,
	}
	s.local.Track(h.id, tracking.Entry{Rank: d.Worker, Origin: s.cfg.ReplicaID, Token: h.token, Client: p.req.Client})
	routed := scheduling.Routed{Worker: d.Worker, NewBlocks: newBlocks, Hashes: p.sampled}
	if h.trackPrefill {
		routed.PrefillTokens = prefill
	}
	var entry *boardEntry
	var onRank uint64
	if pid, ok := s.ranks.pids[d.Worker]; ok {
		entry, onRank = s.board.sent(d.Worker)
		ctx.Send(pid, add)
	}
	s.noteRouted(routed, entry, onRank)
	if uint32(p.blocks) > d.OverlapBlocks {
		s.noteTrustRouted(ctx, d.Worker) // the engine will store blocks: it owes us events
	}
	if !s.cfg.UseKVEvents || s.cfg.Index.PredictedTTL > 0 || s.trustTable.state(d.Worker) != trust.Exact {
		local := make([]uint64, len(p.local))
		for i, h := range p.local {
			local[i] = uint64(h)
		}
		ctx.Send(s.shards[shardOf(d.Worker.WorkerID, len(s.shards))],
			&messages.RoutingDecision{Worker: rankMsg(d.Worker), LocalHashes: local})
	}
	s.gossip.send(&messages.SequenceEvent{Data: &messages.SequenceEvent_Add{Add: add}})
}

// enqueue parks a request until some worker drops under the threshold. A
// request re-checked from the queue head is still in the queue: it keeps
// its place and its enqueue time (the wait bound counts from its arrival).
func (s *schedulerActor) enqueue(ctx actor.Context, p *pending, now time.Time) {
	if s.recheck == p {
		s.recheck = nil
	}
	if p.queued {
		return
	}
	p.enqueued = now
	err := s.queue.Push(scheduling.Waiting[uint64]{
		ID: queueID(p), PriorityJump: p.req.PriorityJump,
		ISL: uint64(len(p.req.TokenIds)), CachedTokens: p.bestCached, Payload: p.id,
	}, now)
	if err != nil {
		s.release(p)
		var oe *scheduling.OverloadError
		rerr := routeErr(messages.RouteErrorCode_ROUTE_ERROR_OVERLOADED, "%v", err)
		if errors.As(err, &oe) {
			rerr.QueueDepth, rerr.QueueLimit = uint32(oe.QueueDepth), uint32(oe.Limit)
		}
		s.obs.Decision("overloaded", 0, len(p.local))
		ctx.Send(p.replyTo, rerr)
		return
	}
	s.obs.Decision("queued", 0, len(p.local))
	p.queued = true
}

func queueID(p *pending) string { return strconv.FormatUint(p.id, 10) }

// release forgets a decision that is being answered, taking it out of the
// queue if it waited there.
func (s *schedulerActor) release(p *pending) {
	delete(s.pending, p.id)
	if p.req != nil && p.req.CancelToken != 0 {
		delete(s.cancels, p.req.CancelToken)
	}
	if s.recheck == p {
		s.recheck = nil
	}
	if p.queued {
		s.queue.Remove(queueID(p))
		p.queued = false
	}
}

// tryDequeue re-reads the loads for the head of the queue (which stays
// queued meanwhile); decide() then routes it or leaves it waiting.
func (s *schedulerActor) tryDequeue(ctx actor.Context) {
	if s.recheck != nil {
		return
	}
	w, ok := s.queue.Peek()
	if !ok {
		return
	}
	p, ok := s.pending[w.Payload]
	if !ok {
		s.queue.Remove(w.ID) // cannot happen: pending and queue change together
		return
	}
	eligible, rerr := s.eligible(p.req.PinnedWorker, p.req.AllowedWorkerIds)
	if rerr != nil {
		s.release(p)
		s.obs.Decision("no_worker", 0, len(p.local))
		ctx.Send(p.replyTo, rerr)
		return
	}
	s.recheck = p
	p.deadline = time.Now().Add(s.cfg.DecisionTimeout)
	p.eligible = eligible
	s.askLoads(ctx, p)
	s.maybeFinish(ctx, p)
}

// expireQueue rejects, oldest first, the requests that waited longer
// than MaxQueueWait (scheduling.Queue.DropEnqueuedBefore).
func (s *schedulerActor) expireQueue(ctx actor.Context, now time.Time) {
	if s.cfg.MaxQueueWait <= 0 {
		return
	}
	for _, w := range s.queue.DropEnqueuedBefore(now.Add(-s.cfg.MaxQueueWait)) {
		p, ok := s.pending[w.Payload]
		if !ok {
			continue
		}
		p.queued = false // DropEnqueuedBefore took it out
		s.release(p)
		rerr := routeErr(messages.RouteErrorCode_ROUTE_ERROR_OVERLOADED,
			"waited %s in the queue and every eligible worker is still over the queue threshold", s.cfg.MaxQueueWait)
		rerr.QueueDepth, rerr.QueueLimit = uint32(s.queue.Len()), uint32(s.queue.Limit())
		s.obs.Decision("overloaded", 0, len(p.local))
		ctx.Send(p.replyTo, rerr)
	}
}

// ---- introspection fan-outs ----

func (s *schedulerActor) startOverlapQuery(ctx actor.Context, m *messages.OverlapScoresQuery) {
	p := s.newPending(ctx, kindOverlaps)
	s.hash(p, m.TokenIds, m.LoraName, true)
	s.askShards(ctx, p)
	s.maybeFinish(ctx, p)
}

func (s *schedulerActor) startLoadsQuery(ctx actor.Context, m *messages.PotentialLoadsQuery) {
	p := s.newPending(ctx, kindLoads)
	p.req = &messages.RouteRequest{TokenIds: m.TokenIds}
	p.eligible = s.ranks.list
	s.hash(p, m.TokenIds, m.LoraName, s.cfg.Scheduling.AssumeKVReuse)
	s.askShards(ctx, p)
	s.askLoads(ctx, p)
	s.maybeFinish(ctx, p)
}

func (s *schedulerActor) startRequestsQuery(ctx actor.Context, m *messages.ActiveRequestsQuery) {
	p := s.newPending(ctx, kindRequests)
	// Every own change up to seq was sent to the ranks before this query.
	p.seq = s.gossip.seq.Load()
	q := &messages.ActiveRequestsQuery{Origin: m.Origin, QueryId: p.id}
	for _, w := range s.ranks.list {
		ctx.Request(s.ranks.pids[w], q)
		p.ranksLeft++
	}
	s.maybeFinish(ctx, p)
}

// potentialLoads is Dynamo's get_potential_loads: what each worker's
// prefill tokens and decode blocks would be with the prospective prompt.
func (s *schedulerActor) potentialLoads(p *pending) *messages.PotentialLoadsReply {
	reply := &messages.PotentialLoadsReply{}
	isl := uint64(len(p.req.TokenIds))
	for _, c := range s.candidates(p, time.Now()) {
		_, cached := scheduling.CacheHitEstimate(s.cfg.Scheduling, s.cfg.BlockSize, c.DeviceOverlap, c.HostOverlap, c.DiskOverlap)
		reply.Loads = append(reply.Loads, &messages.PotentialLoad{
			Worker:                 rankMsg(c.Worker),
			PotentialPrefillTokens: c.ActivePrefillTokens + isl - min(cached, isl),
			PotentialDecodeBlocks:  c.ActiveBlocks + float64(c.NewBlocks),
			PrefillTokensPerSec:    c.PrefillTokensPerSec,
			ActiveRequests:         uint32(c.ActiveRequests),
		})
	}
	return reply
}
