package actors

import (
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/tracking"
	"github.com/kvrouter/kvrouter/trust"
)

func routeErr(code messages.RouteErrorCode, format string, args ...any) *messages.RouteError {
	return decide.RouteErr(code, format, args...)
}

// startRoute steps a route request through validation and constraints
// (decide.Start); an accepted one is hashed once and fanned out to every
// shard and to the sequence actors of the eligible ranks sharing its
// prefix.
func (s *schedulerActor) startRoute(ctx actor.Context, m *messages.RouteRequest) {
	now := time.Now()
	p := &pending{kind: kindRoute} // registered once accepted
	in := decide.Start{Req: m, Ranks: &s.ranks.Ranks, Tracked: s.local, Active: s.local.Len(), Plan: &p.plan}
	in.Session = decide.SessionOf(s.sessions, m.SessionId, now)
	// Start's one effect: Ask (fan out) or Answer (refused). The fan-out
	// may step the Decider again, which reuses its effects.
	if e, refused := s.dec.Step(now, &in)[0].(*decide.Answer); refused {
		s.refused(ctx, m, e)
		return
	}
	s.register(ctx, p)
	p.req = m
	if m.CancelToken != 0 {
		s.cancels[m.CancelToken] = p.id
	}
	s.hash(p, m.TokenIds, m.LoraName, p.plan.Config.AssumeKVReuse)
	s.askShards(ctx, p)
	s.askLoads(ctx, p)
	s.maybeFinish(ctx, p) // no shards and no workers cannot happen, but stay safe
}

// hash computes a request's block hashes and sampled sequence hashes
// (decide.Decider.Hash).
func (s *schedulerActor) hash(p *pending, tokens []uint32, lora string, assumeReuse bool) {
	p.local, p.sampled = s.dec.Hash(s.takeLocal(), tokens, lora, assumeReuse)
	p.blocks = len(p.local)
	p.hashed = time.Now()
	s.obs.DecisionPhase("hash", p.hashed.Sub(p.started))
}

// candidates joins a decision's overlaps and loads (decide.Decider.Join).
func (s *schedulerActor) candidates(p *pending, now time.Time) []scheduling.Candidate {
	return s.dec.Join(p.eligible(), &s.ranks.Ranks, &p.fan.Overlaps, p.fan.Loads, p.blocks, p.fan.Shared, now)
}

// decide steps a route request whose replies are in (decide.Decide) and
// carries out the effects: park it, or record its hops, its session and
// answer.
func (s *schedulerActor) decide(ctx actor.Context, p *pending) {
	now := time.Now()
	if p.scored.IsZero() {
		p.scored = now
		s.obs.DecisionPhase("score", now.Sub(p.hashed))
	}
	explain := s.explain || p.req.Explain || (s.cfg.DecisionSample > 0 && rand.Float64() < s.cfg.DecisionSample)
	in := decide.Decide{ID: p.id, Req: p.req, Plan: &p.plan, Ranks: &s.ranks.Ranks, Candidates: s.candidates(p, now),
		Loads: p.fan.Loads, Sampled: p.sampled, Blocks: p.blocks, Shared: p.fan.Shared, Overlaps: &p.fan.Overlaps,
		Explain: explain}
	if explain {
		in.Signals = signals{p: p, b: s.dec.Board()}
	}
	effects := s.dec.Step(now, &in)
	if q, ok := effects[0].(*decide.Queue); ok {
		// Parked until some worker drops under the threshold (a re-check
		// leaves it in its place).
		if q.Parked {
			s.obs.Decision("queued", 0, len(p.local))
		}
		return
	}
	s.release(p)
	s.obs.DecisionPhase("select", time.Since(now))
	for _, eff := range effects {
		switch e := eff.(type) {
		case *decide.RecordAdd:
			s.record(ctx, p, e)
		case *decide.Session:
			s.recordSession(e, now)
		case *decide.Answer:
			s.answer(ctx, p, e)
		}
	}
}

// answer reports a decision and replies to its caller.
func (s *schedulerActor) answer(ctx actor.Context, p *pending, e *decide.Answer) {
	s.obs.Decision(e.Outcome, e.OverlapBlocks, len(p.local))
	if e.Close {
		s.obs.DecisionClose()
	}
	if e.Receipt != nil {
		s.keepReceipt(p, e)
	}
	if e.Err != nil {
		ctx.Send(p.replyTo, e.Err)
		return
	}
	if e.SharedCache != nil {
		s.obs.SharedCache(e.SharedCache[0], e.SharedCache[1], len(p.local))
	}
	if e.Disaggregation != "" {
		s.obs.Disaggregation(e.Disaggregation)
	}
	s.obs.DecisionPhase("total", time.Since(p.started))
	ctx.Send(p.replyTo, e.Reply)
}

// keepReceipt keeps a decision's route receipt in the ring and, when the
// request asked for it, on its reply. (The sampling draw above is the
// process's random source, never the Decider's: a receipt changes no
// decision.)
func (s *schedulerActor) keepReceipt(p *pending, e *decide.Answer) {
	s.log.Debug("route receipt", "receipt", e.Receipt)
	data, err := json.Marshal(e.Receipt)
	if err != nil { // a cost that is not finite
		s.log.Warn("route receipt not encoded", "request_id", p.req.RequestId, "err", err)
		return
	}
	s.obs.DecisionExplained()
	s.ring.Put(p.req.RequestId, data)
	if p.req.Explain && e.Reply != nil {
		e.Reply.ReceiptJson = data
	}
}

// record adds a routed hop to its rank's active sequences (and, in
// approximate mode, predicts its blocks as cached there), and gossips.
func (s *schedulerActor) record(ctx actor.Context, p *pending, r *decide.RecordAdd) {
	add := &messages.AddRequest{
		RequestId: r.ID, Worker: rankMsg(r.Worker), SequenceHashes: p.sampled,
		PromptBlocks: uint32(p.blocks), Stride: uint32(s.cfg.Sequence.EffectiveStride()),
		PrefillTokens: r.PrefillTokens, ExpectedOutputTokens: r.ExpectedOutput,
		TrackPrefillTokens: r.TrackPrefill, Isl: r.Isl,
	}
	s.local.Track(r.ID, tracking.Entry{Rank: r.Worker, Origin: s.cfg.ReplicaID, Token: r.Token, Client: p.req.Client})
	if pid, ok := s.ranks.pids[r.Worker]; ok {
		ctx.Send(pid, add)
	}
	if uint32(p.blocks) > r.OverlapBlocks {
		s.noteTrustRouted(ctx, r.Worker) // the engine will store blocks: it owes us events
	}
	if !s.cfg.UseKVEvents || s.cfg.Index.PredictedTTL > 0 || s.trustTable.state(r.Worker) != trust.Exact {
		local := make([]uint64, len(p.local))
		for i, h := range p.local {
			local[i] = uint64(h)
		}
		ctx.Send(s.shards[shardOf(r.Worker.WorkerID, len(s.shards))],
			&messages.RoutingDecision{Worker: rankMsg(r.Worker), LocalHashes: local})
	}
	s.gossip.send(&messages.SequenceEvent{Data: &messages.SequenceEvent_Add{Add: add}})
}

// release forgets a decision that is being answered, taking it out of the
// queue if it waited there.
func (s *schedulerActor) release(p *pending) {
	delete(s.pending, p.id)
	if p.req != nil && p.req.CancelToken != 0 {
		delete(s.cancels, p.req.CancelToken)
	}
	s.dec.Forget(&p.plan, p.id)
}

// tryDequeue re-reads the loads for the head of the queue (which stays
// queued meanwhile; decide.Decider.Recheck); decide() then routes it or
// leaves it waiting.
func (s *schedulerActor) tryDequeue(ctx actor.Context) {
	id, ok := s.dec.Recheck()
	if !ok {
		return
	}
	p, ok := s.pending[id]
	if !ok {
		s.dec.Drop(id) // cannot happen: pending and queue change together
		return
	}
	now := time.Now()
	if e, refused := s.dec.Step(now, &decide.Start{Req: p.req, Ranks: &s.ranks.Ranks, Recheck: true, Plan: &p.plan})[0].(*decide.Answer); refused {
		s.release(p)
		s.obs.Decision(e.Outcome, 0, len(p.local))
		ctx.Send(p.replyTo, e.Err)
		return
	}
	p.fan.Deadline = now.Add(s.cfg.DecisionTimeout)
	s.askLoads(ctx, p)
	s.maybeFinish(ctx, p)
}

// expireQueue rejects, oldest first, the requests that waited longer
// than MaxQueueWait (decide.Decider.Expire).
func (s *schedulerActor) expireQueue(ctx actor.Context, now time.Time) {
	for _, id := range s.dec.Expire(now) {
		if p, ok := s.pending[id]; ok {
			rerr := s.dec.WaitedTooLong(&p.plan)
			s.release(p)
			s.obs.Decision("overloaded", 0, len(p.local))
			ctx.Send(p.replyTo, rerr)
		}
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
	p.plan.Eligible = s.ranks.List
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
	for _, w := range s.ranks.List {
		ctx.Request(s.ranks.pids[w], q)
		p.fan.AskedRank()
	}
	s.maybeFinish(ctx, p)
}

// potentialLoads is Dynamo's get_potential_loads
// (decide.Decider.PotentialLoads).
func (s *schedulerActor) potentialLoads(p *pending) *messages.PotentialLoadsReply {
	return s.dec.PotentialLoads(s.candidates(p, time.Now()), uint64(len(p.req.TokenIds)))
}

// signals are a decision's signal sources and times for its route
// receipt (decide.Signals): built only when a receipt is asked for.
type signals struct {
	p *pending
	b *decide.Board
}

func (g signals) Load(w kv.WorkerWithDpRank) (string, int64) {
	return g.b.LoadAt(w, g.p.fan.Loads, g.p.scored.UnixNano())
}

// OverlapAt is when the overlaps were asked for: the shards answered
// between it and the decision.
func (g signals) OverlapAt() int64 { return g.p.hashed.UnixNano() }
