package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/receipts"
)

// schedulerActor drives the scheduler's state machine (decide.Node): it
// feeds it every message it receives and carries out the effects: sends
// to the shards, the ranks' sequence actors, the callers, the
// replication edge and the trust actor, gossip, metrics, logs and the
// ring of route receipts. Every rule (decisions, fan-outs, the requests
// this replica routed, sessions, trust notes) is the Node's. It never
// blocks: fan-outs are plain messages whose replies come back to it.
type schedulerActor struct {
	cfg         Config
	log         *slog.Logger
	obs         Observer
	gossip      *gossiper
	gate        *tickGate // tells the ticker whether deadlines are pending
	shards      []*actor.PID
	replication *actor.PID
	registry    *actor.PID
	restarts    *restartNotice
	trust       *actor.PID // the index-trust actor (nil: trust is off)
	ranks       *rankView
	node        *decide.Node
	routeIn     decide.Route // reused call after call
	// explain: decisions carry route receipts, logged at debug level.
	explain bool
	// ring keeps recent receipts (the Router's: read by the admin API).
	ring *receipts.Ring
}

func newSchedulerProps(cfg Config, ring *receipts.Ring, g *gossiper, gate *tickGate, shards []*actor.PID, replication, registry, trustPID *actor.PID, d actor.Dispatcher) *actor.Props {
	restarts := &restartNotice{}
	return actor.PropsFromProducer(func() actor.Actor {
		log := cfg.Logger.With("component", "scheduler")
		return &schedulerActor{
			explain: log.Enabled(context.Background(), slog.LevelDebug),
			cfg:     cfg, log: log, obs: cfg.Observer, gossip: g, shards: shards, replication: replication,
			ranks: emptyRankView(), node: newNode(cfg, len(shards), trustPID != nil), ring: ring,
			registry: registry, restarts: restarts, gate: gate, trust: trustPID,
		}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(10, 10*time.Second, actor.DefaultDecider)),
		actor.WithMailbox(priorityMailbox()), actor.WithDispatcher(d),
		actor.WithReceiverMiddleware(cfg.schedulerMiddleware...))
}

// newNode builds the scheduler's state machine; its random source is
// seeded by a test, else random. Config.Validate has already checked it.
func newNode(cfg Config, shards int, trust bool) *decide.Node {
	seed := [2]uint64{rand.Uint64(), rand.Uint64()}
	if cfg.rngSeed != nil {
		seed = *cfg.rngSeed
	}
	n, err := decide.NewNode(decide.NodeConfig{Decider: decide.Config{Scheduling: cfg.Scheduling, Limits: cfg.Limits,
		BlockSize: cfg.BlockSize, Stride: cfg.Sequence.EffectiveStride(), TrackActiveBlocks: cfg.TrackActiveBlocks,
		MaxQueueWait: cfg.MaxQueueWait, Pipeline: cfg.Pipeline, Models: cfg.Models}, Seed: seed,
		Sessions: cfg.sessionsConfig(), Replica: cfg.ReplicaID, Shards: shards, DecisionTimeout: cfg.DecisionTimeout,
		KVEvents: cfg.UseKVEvents, PredictedTTL: cfg.Index.PredictedTTL, Trust: trust})
	if err != nil {
		panic(fmt.Sprintf("scheduler config passed validation but was refused: %v", err))
	}
	return n
}

func (s *schedulerActor) Receive(ctx actor.Context) {
	now := time.Now()
	var in decide.Input
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.restarts.started(ctx, s.registry)
		return
	case *messages.RouteRequest:
		// The sampling draw is the process's random source, never the
		// Node's: a receipt changes no decision.
		explain := s.explain || m.Explain || (s.cfg.DecisionSample > 0 && rand.Float64() < s.cfg.DecisionSample)
		s.routeIn = decide.Route{Req: m, Caller: ctx.Sender(), Explain: explain}
		in = &s.routeIn
	case *messages.OverlapScoresQuery, *messages.PotentialLoadsQuery, *messages.ActiveRequestsQuery:
		in = &decide.Query{Msg: m, Caller: ctx.Sender(), Seq: s.gossip.seq.Load()}
	case *messages.OverlapReply:
		in = decide.Overlap{M: m}
	case *messages.LoadReply:
		in = decide.Load{M: m}
	case *messages.ActiveRequestsReply:
		in = decide.Requests{M: m}
	case *messages.RankLoad:
		in = decide.RankLoad{M: m}
	case *messages.RequestLifecycle:
		in = decide.Lifecycle{M: m}
	case *messages.CancelRoute:
		in = decide.Cancel{M: m}
	case *messages.PeerStep:
		in = decide.PeerStep{M: m.Event}
	case *messages.StaleRequestsFreed:
		in = &decide.StaleFreed{IDs: m.RequestIds}
	case *trustTable:
		in = decide.TrustTable{NotExact: m.notExact}
	case *messages.RankTable:
		if s.trust != nil {
			ctx.Send(s.trust, m) // the trust actor tracks the registered ranks
		}
		s.ranks = newRankView(m, ctx.Self().Address)
		in = &decide.RankTable{Ranks: &s.ranks.Ranks, Incarnation: s.ranks.pid}
	case *messages.TrackedQuery:
		in = decide.TrackedQuery{}
	case *messages.Tick:
		now, in = time.Unix(0, m.UnixNano), decide.Tick{}
	case *messages.SessionUpdates:
		in = &decide.SessionUpdates{Events: m.Events}
	case *messages.EndSession:
		in = decide.EndSession{M: m}
	case *messages.SessionQuery:
		in = decide.SessionQuery{M: m}
	case *messages.SessionDigestQuery:
		in = decide.SessionDigestQuery{}
	case *messages.SessionSnapshotQuery:
		in = decide.SessionSnapshotQuery{}
	default:
		return
	}
	for _, eff := range s.node.Step(now, in) {
		s.carryOut(ctx, eff)
	}
	if s.gate != nil {
		s.gate.set(s.node.Waiting())
	}
}

// carryOut carries out one of the Node's effects.
func (s *schedulerActor) carryOut(ctx actor.Context, eff decide.Effect) {
	switch e := eff.(type) {
	case *decide.AskShards:
		for _, sh := range s.shards {
			ctx.Request(sh, e.Query)
		}
	case *decide.ToRank:
		switch pid := s.ranks.pids[e.Rank]; {
		case pid == nil: // the rank left since
		case e.Ask:
			ctx.Request(pid, e.Msg)
		default:
			ctx.Send(pid, e.Msg)
		}
	case *decide.Predict:
		ctx.Send(s.shards[shardOf(e.Rank.WorkerID, len(s.shards))], e.Msg)
	case *decide.Gossip:
		s.gossip.send(e.Event)
	case *decide.Answer:
		s.answer(ctx, e)
	case *decide.Reply:
		if to, _ := e.To.(*actor.PID); to != nil {
			ctx.Send(to, e.Msg)
		}
	case *decide.Respond:
		ctx.Respond(e.Msg)
	case *decide.ToReplication:
		ctx.Forward(s.replication)
	case *decide.TakeOver:
		ctx.Send(s.replication, &releaseRetried{id: e.ID})
	case *decide.Routed:
		ctx.Send(s.trust, trustRouted{rank: e.Rank, at: e.At})
	case *decide.Phase:
		s.obs.DecisionPhase(e.Name, time.Since(e.Since))
	case *decide.Degraded:
		s.obs.DecisionDegraded(e.Reason)
		s.log.Warn("decision made without all replies", "reason", e.Reason, "missing", e.Missing, "timeout", e.After)
	case *decide.Count:
		s.count(e)
	case *decide.Gauge:
		if e.Metric == decide.GaugeQueueDepth {
			s.obs.QueueDepth(e.N)
		} else {
			s.obs.SessionCount(e.N)
		}
	case *decide.ClientRefused:
		s.log.Warn("client at its active-request bound: route refused", "client", e.Client, "active", e.Active,
			"limit", s.cfg.Limits.MaxActiveRequestsPerClient, "replica_active", e.ReplicaActive, "similar_suppressed", e.Suppressed)
	case *decide.SessionRejected:
		s.log.Debug("dropped a peer's session entry", "origin", e.Origin, "err", e.Err)
	}
}

func (s *schedulerActor) count(e *decide.Count) {
	switch e.Metric {
	case decide.CountDecision:
		s.obs.Decision(e.Label, 0, e.N)
	case decide.CountAdmission:
		s.obs.AdmissionRefused(e.Label)
	case decide.CountSession:
		s.obs.SessionEvent(e.Label, e.N)
	case decide.CountSessionMoved:
		s.obs.SessionMoved(e.Label)
	}
}

// answer reports a decision and replies to its caller.
func (s *schedulerActor) answer(ctx actor.Context, e *decide.Answer) {
	s.obs.Decision(e.Outcome, e.OverlapBlocks, e.Blocks)
	if e.Close {
		s.obs.DecisionClose()
	}
	if e.Receipt != nil {
		s.keepReceipt(e)
	}
	to, _ := e.To.(*actor.PID)
	if to == nil {
		return // nobody asked for the answer
	}
	if e.Err != nil {
		ctx.Send(to, e.Err)
		return
	}
	if e.SharedCache != nil {
		s.obs.SharedCache(e.SharedCache[0], e.SharedCache[1], e.Blocks)
	}
	if e.Disaggregation != "" {
		s.obs.Disaggregation(e.Disaggregation)
	}
	s.obs.DecisionPhase("total", time.Since(e.Started))
	ctx.Send(to, e.Reply)
}

// keepReceipt keeps a decision's route receipt in the ring and, when the
// request asked for it, on its reply.
func (s *schedulerActor) keepReceipt(e *decide.Answer) {
	s.log.Debug("route receipt", "receipt", e.Receipt)
	data, err := json.Marshal(e.Receipt)
	if err != nil { // a cost that is not finite
		s.log.Warn("route receipt not encoded", "request_id", e.Req.RequestId, "err", err)
		return
	}
	s.obs.DecisionExplained()
	s.ring.Put(e.Req.RequestId, data)
	if e.Req.Explain && e.Reply != nil {
		e.Reply.ReceiptJson = data
	}
}
