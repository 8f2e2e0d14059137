package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
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
	id      uint64
	kind    pendingKind
	replyTo *actor.PID
	started time.Time
	// fan is what the fan-out gathered (decide.Fanout).
	fan      decide.Fanout
	requests []*messages.SequenceEvent
	seq      uint64 // own gossip seq when a requests query started

	// Route and load queries.
	req    *messages.RouteRequest
	local  []kv.LocalBlockHash
	blocks int // the prompt's full blocks
	// sampled is the prompt's sequence hashes as load queries and adds
	// carry them (one per stride blocks, sequence.Sample); the load query
	// and the add share it, and neither is mutated.
	sampled []uint64
	hashed  time.Time
	scored  time.Time
	// plan is the decision's state between its steps (decide.Plan: the
	// eligible ranks, the session binding, the best cache hit seen).
	plan decide.Plan
}

// eligible are the ranks a decision may choose.
func (p *pending) eligible() []kv.WorkerWithDpRank { return p.plan.Eligible }

func (s *schedulerActor) newPending(ctx actor.Context, kind pendingKind) *pending {
	return s.register(ctx, &pending{kind: kind})
}

// register numbers a fan-out and keeps it until it is answered.
func (s *schedulerActor) register(ctx actor.Context, p *pending) *pending {
	s.nextID++
	now := time.Now()
	p.id, p.replyTo, p.started, p.fan.Deadline = s.nextID, ctx.Sender(), now, now.Add(s.cfg.DecisionTimeout)
	s.pending[p.id] = p
	return p
}

// askShards fans a score request out to every shard.
func (s *schedulerActor) askShards(ctx actor.Context, p *pending) {
	hashes := kv.LocalHashesAsUint64(p.local) // p.local is never modified
	p.fan.AskShards(len(s.shards))
	q := &messages.ScoreRequest{QueryId: p.id, LocalHashes: hashes}
	for _, sh := range s.shards {
		ctx.Request(sh, q)
	}
}

// askLoads asks the ranks sharing the prompt's prefix for their load
// (decide.Decider.LoadTargets).
func (s *schedulerActor) askLoads(ctx actor.Context, p *pending) {
	p.fan.AskLoads()
	var q *messages.LoadQuery
	for _, w := range s.dec.LoadTargets(p.eligible(), p.sampled) {
		if pid, ok := s.ranks.pids[w]; ok {
			if q == nil {
				q = &messages.LoadQuery{QueryId: p.id, SequenceHashes: p.sampled, PromptBlocks: uint32(p.blocks)}
			}
			ctx.Request(pid, q)
			p.fan.AskedRank()
		}
	}
}

func (s *schedulerActor) onOverlap(ctx actor.Context, m *messages.OverlapReply) {
	if p, ok := s.pending[m.QueryId]; ok && p.fan.OnOverlap(m) {
		s.maybeFinish(ctx, p)
	}
}

func (s *schedulerActor) onLoad(ctx actor.Context, m *messages.LoadReply) {
	if p, ok := s.pending[m.QueryId]; ok && p.fan.OnLoad(m) {
		s.maybeFinish(ctx, p)
	}
}

func (s *schedulerActor) onRequests(ctx actor.Context, m *messages.ActiveRequestsReply) {
	if p, ok := s.pending[m.QueryId]; ok && p.fan.OnRankReply() {
		p.requests = append(p.requests, m.Events...)
		s.maybeFinish(ctx, p)
	}
}

func (s *schedulerActor) maybeFinish(ctx actor.Context, p *pending) {
	if !p.fan.Waiting() {
		s.finish(ctx, p)
	}
}

// timeout decides with the replies that arrived once the fan-out's
// deadline passed (decide.Fanout.Expire), and reports what was missing.
func (s *schedulerActor) timeout(ctx actor.Context, p *pending, now time.Time) {
	shards, ranks, expired := p.fan.Expire(now)
	if !expired {
		return
	}
	if shards > 0 {
		s.obs.DecisionDegraded("shard_timeout")
		s.log.Warn("decision made without all shards", "missing", shards, "timeout", s.cfg.DecisionTimeout)
	}
	if ranks > 0 {
		s.obs.DecisionDegraded("load_timeout")
		s.log.Warn("decision made without all load replies", "missing", ranks, "timeout", s.cfg.DecisionTimeout)
	}
	s.finish(ctx, p)
}

func (s *schedulerActor) finish(ctx actor.Context, p *pending) {
	defer s.recycleLocal(p)
	switch p.kind {
	case kindRoute:
		s.decide(ctx, p)
		return
	case kindOverlaps:
		s.release(p)
		reply := &messages.OverlapScoresReply{RequestBlocks: uint32(len(p.local)), SharedBlocks: p.fan.Shared}
		reply.Ranks = p.fan.Overlaps.Every(s.ranks.List)
		ctx.Send(p.replyTo, reply)
	case kindLoads:
		s.release(p)
		ctx.Send(p.replyTo, s.potentialLoads(p))
	case kindRequests:
		s.release(p)
		ctx.Send(p.replyTo, &messages.ActiveRequestsReply{Events: p.requests, Seq: p.seq})
	}
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
// still read it (TestTimedOutDecisionKeepsItsHashes).
func (s *schedulerActor) recycleLocal(p *pending) {
	if p.local == nil || !p.fan.AllShardsAnswered(len(s.shards)) || len(s.localFree) >= localFreeMax ||
		cap(p.local) > localReuseMaxBlocks {
		return
	}
	if _, live := s.pending[p.id]; live {
		return
	}
	s.localFree = append(s.localFree, p.local[:0])
	p.local = nil
}

// takeLocal returns an empty slice for a decision's block hashes.
func (s *schedulerActor) takeLocal() []kv.LocalBlockHash {
	n := len(s.localFree)
	if n == 0 {
		return nil
	}
	out := s.localFree[n-1]
	s.localFree = s.localFree[:n-1]
	return out
}
