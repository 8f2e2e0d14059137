package actors

import (
	"context"
	"fmt"
	"github.com/kvrouter/kvrouter/receipts"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/sessions"
	"github.com/kvrouter/kvrouter/tracking"
)

// schedulerActor drives the decision (package decide): it steps the
// Decider with each request, fans it out to the shards (and to the
// sequence actors of the ranks sharing the prompt's prefix), applies the
// ranks' publications to the Decider's board, steps the Decider again once
// the replies are in, and carries out its effects: parks requests it
// queues, records and gossips the requests it routed through their
// lifecycle, and answers. It never blocks: fan-outs are plain
// messages whose replies come back to it, matched by query id.
//
// The rank set comes from the registry actor (RankTable); peers' requests
// are the replication edge's, and reach the scheduler only through the
// ranks' published loads.
type schedulerActor struct {
	cfg    Config
	log    *slog.Logger
	obs    Observer
	gossip *gossiper
	gate   *tickGate // tells the ticker whether deadlines are pending
	// localFree are block-hash slices of finished decisions, reused by the
	// next ones (recycleLocal).
	localFree   [][]kv.LocalBlockHash
	shards      []*actor.PID
	replication *actor.PID

	ranks *rankView
	local *tracking.Table // requests this replica routed

	registry *actor.PID
	restarts *restartNotice

	pending map[uint64]*pending
	// cancels maps a route call's cancel token to its pending decision.
	cancels map[uint64]uint64
	nextID  uint64
	// dec makes the decisions (package decide); this actor feeds it and
	// carries out its effects.
	dec *decide.Decider
	// explain: decisions carry route receipts, logged at debug level.
	explain bool
	// ring keeps recent receipts (the Router's: read by the admin API).
	ring *receipts.Ring

	// sessions is the sticky-session table (cluster state: peers' writes
	// arrive as SessionUpdates); sessionStats its counters last reported.
	sessions     *sessions.Table
	sessionStats sessions.Stats

	// trust is the index-trust actor (nil: trust is off); trustTable its
	// last verdicts; trustNoted when each rank was last reported routed.
	trust      *actor.PID
	trustTable *trustTable
	trustNoted map[kv.WorkerWithDpRank]int64

	// refusals paces the log lines of clients refused at their own bound.
	refusals loglimit.Keyed[string]
}

func newSchedulerProps(cfg Config, ring *receipts.Ring, g *gossiper, gate *tickGate, shards []*actor.PID, replication, registry, trustPID *actor.PID, d actor.Dispatcher) *actor.Props {
	restarts := &restartNotice{}
	return actor.PropsFromProducer(func() actor.Actor {
		table, err := sessions.New(cfg.sessionsConfig())
		if err != nil {
			panic(fmt.Sprintf("sessions config passed validation but was refused: %v", err))
		}
		log := cfg.Logger.With("component", "scheduler")
		return &schedulerActor{
			explain:  log.Enabled(context.Background(), slog.LevelDebug),
			sessions: table,
			cfg:      cfg, log: log, obs: cfg.Observer, gossip: g,
			shards: shards, replication: replication,
			ranks: emptyRankView(), local: tracking.New(),
			pending: map[uint64]*pending{}, cancels: map[uint64]uint64{},
			dec:      newDecider(cfg),
			ring:     ring,
			registry: registry, restarts: restarts, gate: gate, trust: trustPID,
		}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(10, 10*time.Second, actor.DefaultDecider)),
		actor.WithMailbox(priorityMailbox()), actor.WithDispatcher(d),
		actor.WithReceiverMiddleware(cfg.schedulerMiddleware...))
}

func (s *schedulerActor) Receive(ctx actor.Context) {
	defer s.noteDeadlines()
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.restarts.started(ctx, s.registry)
	case *messages.RouteRequest:
		s.startRoute(ctx, m)
	case *messages.OverlapScoresQuery:
		s.startOverlapQuery(ctx, m)
	case *messages.PotentialLoadsQuery:
		s.startLoadsQuery(ctx, m)
	case *messages.ActiveRequestsQuery:
		s.startRequestsQuery(ctx, m)
	case *messages.OverlapReply:
		s.onOverlap(ctx, m)
	case *messages.LoadReply:
		s.onLoad(ctx, m)
	case *messages.RankLoad:
		s.notePeerStart(ctx, m) // before the board takes the new load
		s.dec.Board().Apply(m, time.Now().UnixNano())
		if s.dec.QueueLen() > 0 {
			s.tryDequeue(ctx) // a free shows in the load only now
		}
	case *messages.ActiveRequestsReply:
		s.onRequests(ctx, m)
	case *messages.RequestLifecycle:
		s.lifecycle(ctx, m)
	case *messages.CancelRoute:
		s.cancel(ctx, m)
	case *messages.PeerStep:
		s.peerStep(ctx, m.Event)
	case *messages.StaleRequestsFreed:
		for _, id := range m.RequestIds {
			if _, ok := s.local.Untrack(id); ok {
				// Peers must see our own expiries, or their view of us
				// keeps disagreeing with our digest.
				s.gossip.send(&messages.SequenceEvent{Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: id}}})
			}
		}
	case *trustTable:
		s.trustTable = m
	case *messages.RankTable:
		if s.trust != nil {
			ctx.Send(s.trust, m) // the trust actor tracks the registered ranks
		}
		s.ranks = newRankView(m, ctx.Self().Address)
		s.dec.Board().Sync(s.ranks.List, s.ranks.pid, func(w kv.WorkerWithDpRank) { ctx.Send(s.ranks.pids[w], &messages.RankLoadQuery{}) })
		s.local.DropUnregistered(s.ranks.has)
		s.tryDequeue(ctx)
	case *messages.TrackedQuery:
		top, n := s.local.TopClient()
		ctx.Respond(&messages.TrackedReply{TrackedRequests: uint64(s.local.Len()), QueueDepth: uint32(s.dec.QueueLen()),
			Clients: uint32(s.local.Clients()), TopClient: top, TopClientRequests: uint64(n)})
	case *messages.Tick:
		s.tick(ctx, time.Unix(0, m.UnixNano))
	case *messages.SessionUpdates:
		s.applySessions(m.Events)
	case *messages.EndSession:
		s.endSession(ctx, m)
	case *messages.SessionQuery:
		s.querySession(ctx, m)
	case *messages.SessionDigestQuery:
		d := s.sessions.Digest()
		ctx.Respond(&messages.SessionDigestReply{Count: uint64(d.Count), Hash: d.Hash})
	case *messages.SessionSnapshotQuery:
		ctx.Respond(s.sessionSnapshot())
	}
}

// lifecycle applies a prefill-completed, output-block or free step of a
// request this replica routed, and gossips it. A request it did not route
// may be a peer's: the replication edge answers for those.
func (s *schedulerActor) lifecycle(ctx actor.Context, m *messages.RequestLifecycle) {
	e, ok := s.local.Lookup(m.RequestId)
	if !ok {
		ctx.Forward(s.replication)
		return
	}
	pid := s.ranks.pids[e.Rank]
	if pid == nil {
		s.local.Untrack(m.RequestId)
		ctx.Respond(&messages.LifecycleReply{RequestId: m.RequestId, Found: false})
		return
	}
	if gossiped := s.gossip.step(ctx, pid, m); gossiped {
		if _, ok := m.Step.(*messages.RequestLifecycle_Free); ok {
			s.freed(ctx, m.RequestId)
		}
		s.tryDequeue(ctx)
	}
	ctx.Respond(&messages.LifecycleReply{RequestId: m.RequestId, Found: true})
}

// cancel drops the decision of a route call whose client left: answered
// with ROUTE_ERROR_CANCELLED if it is still in flight or queued (a queued
// request is never admitted later as a ghost), freed and gossiped if it
// was already recorded, since nobody will receive its answer to free it.
func (s *schedulerActor) cancel(ctx actor.Context, m *messages.CancelRoute) {
	if id, ok := s.cancels[m.CancelToken]; ok {
		if p := s.pending[id]; p != nil {
			s.release(p)
			s.obs.Decision("cancelled", 0, len(p.local))
			ctx.Send(p.replyTo, routeErr(messages.RouteErrorCode_ROUTE_ERROR_CANCELLED, "client left"))
			s.tryDequeue(ctx)
		}
		return
	}
	e, ok := s.local.Lookup(m.RequestId)
	if !ok || e.Token != m.CancelToken {
		return // answered and freed already, or the id is a newer request's
	}
	s.obs.Decision("cancelled", 0, 0)
	s.gossip.step(ctx, s.ranks.pids[e.Rank], &messages.RequestLifecycle{RequestId: m.RequestId,
		Step: &messages.RequestLifecycle_Free{Free: &messages.FreeRequest{RequestId: m.RequestId}}})
	s.freed(ctx, m.RequestId)
	s.tryDequeue(ctx)
}

// peerStep applies a peer's prefill-completed or free of a request this
// replica routed (its client finished it through the peer). The peer
// gossiped it already, so it is not published again.
func (s *schedulerActor) peerStep(ctx actor.Context, ev *messages.SequenceEvent) {
	c := changeOf(ev)
	e, ok := s.local.Lookup(c.RequestID)
	if !ok || ev.Origin == s.cfg.ReplicaID {
		return // nobody here holds it (already freed, or never seen)
	}
	if pid := s.ranks.pids[e.Rank]; pid != nil {
		ctx.Send(pid, ev)
	}
	if c.Step == tracking.StepFree {
		s.freed(ctx, c.RequestID)
	}
	s.tryDequeue(ctx)
}

// tick runs the decision path's housekeeping: decision timeouts and queue
// waits and retries. (The registry forwards time to the other actors.)
// noteDeadlines tells the ticker whether anything here has a deadline
// (tickgate.go).
func (s *schedulerActor) noteDeadlines() {
	if s.gate != nil {
		s.gate.set(len(s.pending) > 0 || s.dec.QueueLen() > 0)
	}
}

func (s *schedulerActor) tick(ctx actor.Context, now time.Time) {
	for _, p := range s.pending {
		s.timeout(ctx, p, now)
	}
	s.expireQueue(ctx, now)
	s.tryDequeue(ctx)
	s.expireSessions(now)
	s.obs.QueueDepth(s.dec.QueueLen())
}

// newDecider builds the decision state machine; its random source is
// seeded by a test, else random. Config.Validate has already checked the
// queue's policy and limit.
func newDecider(cfg Config) *decide.Decider {
	seed := [2]uint64{rand.Uint64(), rand.Uint64()}
	if cfg.rngSeed != nil {
		seed = *cfg.rngSeed
	}
	d, err := decide.New(decide.Config{Scheduling: cfg.Scheduling, Limits: cfg.Limits, BlockSize: cfg.BlockSize,
		Stride: cfg.Sequence.EffectiveStride(), TrackActiveBlocks: cfg.TrackActiveBlocks, MaxQueueWait: cfg.MaxQueueWait,
		Pipeline: cfg.Pipeline, Models: cfg.Models}, seed)
	if err != nil {
		panic(fmt.Sprintf("scheduler config passed validation but was refused: %v", err))
	}
	return d
}
