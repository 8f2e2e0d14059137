package decide

import (
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/tracking"
	"github.com/kvrouter/kvrouter/trust"
)

type pendingKind uint8

const (
	kindRoute pendingKind = iota
	kindOverlaps
	kindLoads
	kindRequests
)

// pending is one fan-out in flight: the replies gathered so far and what
// to do once they are all in (or the deadline passes).
type pending struct {
	id     uint64
	kind   pendingKind
	caller any
	fan    Fanout
	// requests gathers an ActiveRequestsQuery's replies; seq is the
	// owner's gossip sequence number when it started.
	requests []*messages.SequenceEvent
	seq      uint64

	req     *messages.RouteRequest
	explain bool
	local   []kv.LocalBlockHash
	blocks  int // the prompt's full blocks
	// sampled is the prompt's sequence hashes as load queries and adds
	// carry them (one per stride blocks); never mutated.
	sampled []uint64
	// tip is the last sequence hash of the prompt's block chain, known
	// (hasTip) when it was hashed with assumed reuse (the retry digest).
	tip     kv.SequenceHash
	hasTip  bool
	started time.Time
	hashed  time.Time
	scored  time.Time
	plan    Plan
}

// route steps a route call through validation and constraints (Start);
// an accepted one is hashed once and fanned out to every shard and to
// the sequence actors of the eligible ranks sharing its prefix.
func (n *Node) route(now time.Time, r *Route) {
	m := r.Req
	if m.UpdateStates && n.retried(now, r) {
		return
	}
	p := &pending{kind: kindRoute} // registered once accepted
	n.startIn = Start{Req: m, Ranks: n.ranks, Tracked: n.local, Active: n.local.Len(), Plan: &p.plan,
		Session: SessionOf(n.sess, m.SessionId, now)}
	if a, refused := n.dec.Step(now, &n.startIn)[0].(*Answer); refused {
		n.refused(now, r, a)
		return
	}
	n.register(now, p, r.Caller)
	p.req, p.explain = m, r.Explain
	if m.CancelToken != 0 {
		n.cancels[m.CancelToken] = p.id
	}
	n.hash(now, p, m.TokenIds, m.LoraName, p.plan.Config.AssumeKVReuse)
	n.askShards(p)
	n.askLoads(p)
	n.maybeFinish(now, p) // no shards and no workers cannot happen, but stay safe
}

// refused answers a route Start refused (bad input, an admission bound,
// no eligible rank).
func (n *Node) refused(now time.Time, r *Route, a *Answer) {
	switch a.Outcome {
	case "overloaded":
		n.count(CountAdmission, "active_requests", 1)
	case "client_limit":
		n.count(CountAdmission, "client_active_requests", 1)
		c := r.Req.Client
		if ok, _, suppressed := n.refusals.Allow(c, now); ok {
			put(&n.fx.out, &n.fx.refusals, ClientRefused{Client: c, Active: n.local.ClientActive(c),
				ReplicaActive: n.local.Len(), Suppressed: suppressed})
		}
	}
	n.answer(&pending{caller: r.Caller, req: r.Req, started: now}, a)
}

// query starts an introspection fan-out.
func (n *Node) query(now time.Time, q *Query) {
	switch m := q.Msg.(type) {
	case *messages.OverlapScoresQuery:
		p := n.register(now, &pending{kind: kindOverlaps}, q.Caller)
		n.hash(now, p, m.TokenIds, m.LoraName, true)
		n.askShards(p)
		n.maybeFinish(now, p)
	case *messages.PotentialLoadsQuery:
		p := n.register(now, &pending{kind: kindLoads}, q.Caller)
		p.req = &messages.RouteRequest{TokenIds: m.TokenIds}
		p.plan.Eligible = n.ranks.List
		n.hash(now, p, m.TokenIds, m.LoraName, n.cfg.Decider.Scheduling.AssumeKVReuse)
		n.askShards(p)
		n.askLoads(p)
		n.maybeFinish(now, p)
	case *messages.ActiveRequestsQuery:
		// Every own change up to Seq was sent to the ranks before this.
		p := n.register(now, &pending{kind: kindRequests, seq: q.Seq}, q.Caller)
		ask := &messages.ActiveRequestsQuery{Origin: m.Origin, QueryId: p.id}
		for _, w := range n.ranks.List {
			n.toRank(w, ask, true)
			p.fan.AskedRank()
		}
		n.maybeFinish(now, p)
	}
}

// register numbers a fan-out and keeps it until it is answered.
func (n *Node) register(now time.Time, p *pending, caller any) *pending {
	n.nextID++
	p.id, p.caller, p.started, p.fan.Deadline = n.nextID, caller, now, now.Add(n.cfg.DecisionTimeout)
	n.pending[p.id] = p
	return p
}

// hash computes a request's block hashes and sampled sequence hashes
// (Decider.Hash).
func (n *Node) hash(now time.Time, p *pending, tokens []uint32, lora string, assumeReuse bool) {
	p.local, p.sampled = n.dec.Hash(n.takeLocal(), tokens, lora, assumeReuse)
	if assumeReuse {
		p.tip, p.hasTip = n.dec.hashedTip(), true
	}
	p.blocks, p.hashed = len(p.local), now
	n.phase("hash", now)
}

// askShards fans a score request out to every shard.
func (n *Node) askShards(p *pending) {
	p.fan.AskShards(n.cfg.Shards)
	q := &messages.ScoreRequest{QueryId: p.id, LocalHashes: kv.LocalHashesAsUint64(p.local)} // p.local is never modified
	put(&n.fx.out, &n.fx.asks, AskShards{Query: q})
}

// askLoads asks the ranks sharing the prompt's prefix for their load
// (Decider.LoadTargets).
func (n *Node) askLoads(p *pending) {
	p.fan.AskLoads()
	var q *messages.LoadQuery
	for _, w := range n.dec.LoadTargets(p.plan.Eligible, p.sampled) {
		if n.ranks.Has(w) {
			if q == nil {
				q = &messages.LoadQuery{QueryId: p.id, SequenceHashes: p.sampled, PromptBlocks: uint32(p.blocks)}
			}
			n.toRank(w, q, true)
			p.fan.AskedRank()
		}
	}
}

func (n *Node) maybeFinish(now time.Time, p *pending) {
	if !p.fan.Waiting() {
		n.finish(now, p)
	}
}

// timeout decides with the replies that arrived once the fan-out's
// deadline passed (Fanout.Expire), and reports what was missing.
func (n *Node) timeout(now time.Time, p *pending) {
	shards, ranks, expired := p.fan.Expire(now)
	if !expired {
		return
	}
	if shards > 0 {
		put(&n.fx.out, &n.fx.degraded, Degraded{Reason: "shard_timeout", Missing: shards, After: n.cfg.DecisionTimeout})
	}
	if ranks > 0 {
		put(&n.fx.out, &n.fx.degraded, Degraded{Reason: "load_timeout", Missing: ranks, After: n.cfg.DecisionTimeout})
	}
	n.finish(now, p)
}

func (n *Node) finish(now time.Time, p *pending) {
	defer n.recycleLocal(p)
	if p.kind == kindRoute {
		n.decide(now, p)
		return
	}
	n.release(p)
	switch p.kind {
	case kindOverlaps:
		n.reply(p.caller, &messages.OverlapScoresReply{RequestBlocks: uint32(len(p.local)), SharedBlocks: p.fan.Shared,
			Ranks: p.fan.Overlaps.Every(n.ranks.List)})
	case kindLoads:
		// Dynamo's get_potential_loads.
		n.reply(p.caller, n.dec.PotentialLoads(n.candidates(now, p), uint64(len(p.req.TokenIds))))
	case kindRequests:
		n.reply(p.caller, &messages.ActiveRequestsReply{Events: p.requests, Seq: p.seq})
	}
}

// candidates joins a decision's overlaps and loads (Decider.Join).
func (n *Node) candidates(now time.Time, p *pending) []scheduling.Candidate {
	return n.dec.Join(p.plan.Eligible, n.ranks, &p.fan.Overlaps, p.fan.Loads, p.blocks, p.fan.Shared, now)
}

// signals are a decision's signal sources and times for its route
// receipt (Signals): built only when a receipt is asked for.
type signals struct {
	p *pending
	b *Board
}

func (g signals) Load(w kv.WorkerWithDpRank) (string, int64) {
	return g.b.LoadAt(w, g.p.fan.Loads, g.p.scored.UnixNano())
}

// OverlapAt is when the overlaps were asked for: the shards answered
// between it and the decision.
func (g signals) OverlapAt() int64 { return g.p.hashed.UnixNano() }

// decide steps a route request whose replies are in (Decide) and carries
// out the Decider's effects: park it, or record its hops and its session
// and answer.
func (n *Node) decide(now time.Time, p *pending) {
	if p.scored.IsZero() {
		p.scored = now
		n.phase("score", p.hashed)
	}
	n.decideIn = Decide{ID: p.id, Req: p.req, Plan: &p.plan, Ranks: n.ranks, Candidates: n.candidates(now, p),
		Loads: p.fan.Loads, Sampled: p.sampled, Blocks: p.blocks, Shared: p.fan.Shared, Overlaps: &p.fan.Overlaps,
		Explain: p.explain}
	if p.explain {
		n.decideIn.Signals = signals{p: p, b: n.dec.board}
	}
	effects := n.dec.Step(now, &n.decideIn)
	if q, ok := effects[0].(*Queue); ok {
		// Parked until some worker drops under the threshold (a re-check
		// leaves it in its place).
		if q.Parked {
			n.count(CountDecision, "queued", len(p.local))
		}
		return
	}
	n.release(p)
	n.phase("select", now)
	for _, eff := range effects {
		switch e := eff.(type) {
		case *RecordAdd:
			n.record(now, p, e)
		case *Session:
			n.bindSession(now, e)
		case *Answer:
			if p.req.UpdateStates && e.Reply != nil {
				n.keepRouted(p, e.Reply)
				put(&n.fx.out, &n.fx.takeOvers, TakeOver{ID: p.req.RequestId})
			}
			n.answer(p, e)
		}
	}
}

// record adds a routed hop to its rank's active sequences (and, where
// the rank's index is not exact, predicts its blocks as cached there),
// tracks it and gossips it.
func (n *Node) record(now time.Time, p *pending, r *RecordAdd) {
	add := &messages.AddRequest{
		RequestId: r.ID, Worker: RankMsg(r.Worker), SequenceHashes: p.sampled,
		PromptBlocks: uint32(p.blocks), Stride: uint32(max(n.cfg.Decider.Stride, 1)),
		PrefillTokens: r.PrefillTokens, ExpectedOutputTokens: r.ExpectedOutput,
		TrackPrefillTokens: r.TrackPrefill, Isl: r.Isl,
	}
	n.local.Track(r.ID, tracking.Entry{Rank: r.Worker, Origin: n.cfg.Replica, Token: r.Token, Client: p.req.Client})
	if n.ranks.Has(r.Worker) {
		n.toRank(r.Worker, add, false)
	}
	if uint32(p.blocks) > r.OverlapBlocks {
		n.noteRouted(now, r.Worker) // the engine will store blocks: it owes us events
	}
	if !n.cfg.KVEvents || n.cfg.PredictedTTL > 0 || n.notExact[r.Worker] != trust.Exact {
		local := make([]uint64, len(p.local))
		for i, h := range p.local {
			local[i] = uint64(h)
		}
		put(&n.fx.out, &n.fx.predicts, Predict{Rank: r.Worker, Msg: &messages.RoutingDecision{Worker: add.Worker, LocalHashes: local}})
	}
	n.gossip(&messages.SequenceEvent{Data: &messages.SequenceEvent_Add{Add: add}})
}

// release forgets a decision that is being answered, taking it out of the
// queue if it waited there.
func (n *Node) release(p *pending) {
	delete(n.pending, p.id)
	if p.req != nil && p.req.CancelToken != 0 {
		delete(n.cancels, p.req.CancelToken)
	}
	n.dec.Forget(&p.plan, p.id)
}

// tryDequeue re-reads the loads for the head of the queue (which stays
// queued meanwhile; Decider.Recheck); decide then routes it or leaves it
// waiting.
func (n *Node) tryDequeue(now time.Time) {
	id, ok := n.dec.Recheck()
	if !ok {
		return
	}
	p, ok := n.pending[id]
	if !ok {
		n.dec.Drop(id) // cannot happen: pending and queue change together
		return
	}
	n.startIn = Start{Req: p.req, Ranks: n.ranks, Recheck: true, Plan: &p.plan}
	if a, refused := n.dec.Step(now, &n.startIn)[0].(*Answer); refused {
		n.release(p)
		n.answer(p, a)
		return
	}
	p.fan.Deadline = now.Add(n.cfg.DecisionTimeout)
	n.askLoads(p)
	n.maybeFinish(now, p)
}

// cancel drops the decision of a route call whose client left: answered
// with ROUTE_ERROR_CANCELLED if it is still in flight or queued (a queued
// request is never admitted later as a ghost), freed and gossiped if it
// was already recorded, since nobody will receive its answer to free it.
func (n *Node) cancel(now time.Time, m *messages.CancelRoute) {
	if id, ok := n.cancels[m.CancelToken]; ok {
		if p := n.pending[id]; p != nil {
			n.release(p)
			n.answer(p, &Answer{Err: RouteErr(messages.RouteErrorCode_ROUTE_ERROR_CANCELLED, "client left"), Outcome: "cancelled"})
			n.tryDequeue(now)
		}
		return
	}
	e, ok := n.local.Lookup(m.RequestId)
	if !ok || e.Token != m.CancelToken {
		return // answered and freed already, or the id is a newer request's
	}
	n.count(CountDecision, "cancelled", 0)
	n.free(e.Rank, m.RequestId)
	n.freed(m.RequestId)
	n.tryDequeue(now)
}

// localFreeMax bounds the reusable block-hash slices, and
// localReuseMaxBlocks the size of one kept (a rare huge prompt's slice is
// left to the GC).
const (
	localFreeMax        = 4
	localReuseMaxBlocks = 1 << 14
)

// recycleLocal keeps a finished decision's block hashes for the next one:
// they were 2 kB of a 4k-token decision's 6.9 kB of allocation. Only a
// decision that is over (not queued) and whose every shard replied gives
// its slice back: a shard that has not answered (timeout, cancel) may
// still read it.
func (n *Node) recycleLocal(p *pending) {
	if p.local == nil || !p.fan.AllShardsAnswered(n.cfg.Shards) || len(n.localFree) >= localFreeMax ||
		cap(p.local) > localReuseMaxBlocks {
		return
	}
	if _, live := n.pending[p.id]; live {
		return
	}
	n.localFree = append(n.localFree, p.local[:0])
	p.local = nil
}

// takeLocal returns an empty slice for a decision's block hashes.
func (n *Node) takeLocal() []kv.LocalBlockHash {
	k := len(n.localFree)
	if k == 0 {
		return nil
	}
	out := n.localFree[k-1]
	n.localFree = n.localFree[:k-1]
	return out
}
