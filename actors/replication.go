package actors

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/tracking"
)

// replicationActor is the replica's edge to its peers' state: it applies
// the active-sequence changes peers gossip (to the sequence actors, on its
// own goroutine, so peers' traffic never queues behind routing
// decisions), forgets a departed peer's requests, replaces a peer's
// requests with its full state after a divergence, and finishes
// lifecycle steps that clients send here for a request a peer routed.
//
// It owns the table of peer-routed requests; the scheduler owns the table
// of its own. Both apply the rules of package tracking.
type replicationActor struct {
	registry  *actor.PID
	restarts  *restartNotice
	cfg       Config
	log       *slog.Logger
	obs       Observer
	gossip    *gossiper
	backlog   *backlog // peers' events sent here and not yet applied
	scheduler *actor.PID
	ranks     *rankView
	remote    *tracking.Table
	// strideWarned: peers whose stride mismatch was logged already.
	strideWarned map[string]bool
	// byRank is remoteBatch's scratch space, reused across batches.
	byRank map[kv.WorkerWithDpRank][]*messages.SequenceEvent
}

func newReplicationProps(cfg Config, g *gossiper, scheduler, registry *actor.PID, bl *backlog, d actor.Dispatcher) *actor.Props {
	restarts := &restartNotice{}
	return actor.PropsFromProducer(func() actor.Actor {
		return &replicationActor{
			registry: registry, restarts: restarts,
			cfg: cfg, log: cfg.Logger.With("component", "replication"), obs: cfg.Observer, gossip: g, backlog: bl,
			scheduler: scheduler, ranks: emptyRankView(), remote: tracking.New(),
			strideWarned: map[string]bool{}, byRank: map[kv.WorkerWithDpRank][]*messages.SequenceEvent{},
		}
	}, actor.WithDispatcher(d))
}

func (a *replicationActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.restarts.started(ctx, a.registry)
	case *messages.SequenceEvent:
		a.backlog.done(1)
		a.remoteBatch(ctx, []*messages.SequenceEvent{m})
	case *messages.SequenceEventBatch:
		a.backlog.done(len(m.Events))
		a.remoteBatch(ctx, m.Events)
	case *messages.DropOrigin:
		a.dropOrigin(ctx, m.Origin)
	case *messages.ReplaceOrigin:
		a.replaceOrigin(ctx, m)
	case *messages.RequestLifecycle:
		a.lifecycle(ctx, m)
	case *releaseRetried:
		a.releaseRetried(ctx, m)
	case *messages.StaleRequestsFreed:
		for _, id := range m.RequestIds {
			a.remote.Untrack(id)
		}
	case *messages.RankTable:
		a.ranks = newRankView(m, ctx.Self().Address)
		a.remote.DropUnregistered(a.ranks.has)
	case *messages.TrackedQuery:
		ctx.Respond(&messages.TrackedReply{TrackedRequests: uint64(a.remote.Len())})
	}
}

// remoteBatch applies a run of peers' changes, giving each rank all of
// its events in one message: every replica applies every peer's
// decisions, so a mailbox operation per rank instead of per event is most
// of what a peer's share of a decision costs. A rank's events keep their
// order; ranks are independent.
func (a *replicationActor) remoteBatch(ctx actor.Context, evs []*messages.SequenceEvent) {
	var order []kv.WorkerWithDpRank
	stride := a.cfg.Sequence.EffectiveStride()
	registered := a.ranks.has // one method value per batch, not per event
	var sessionWrites []*messages.SequenceEvent
	for _, ev := range evs {
		if decide.IsSessionEvent(ev) {
			sessionWrites = append(sessionWrites, ev)
			continue
		}
		c := decide.ChangeOf(ev)
		from, free := a.movedFree(c) // a request routed again elsewhere (takeover.go)
		w, out := a.remote.ApplyRemote(c, a.cfg.ReplicaID, stride, registered)
		switch out {
		case tracking.Apply:
			if free != nil && a.ranks.pids[from] != nil {
				if _, seen := a.byRank[from]; !seen {
					order = append(order, from)
				}
				a.byRank[from] = append(a.byRank[from], free)
			}
			if _, seen := a.byRank[w]; !seen {
				order = append(order, w)
			}
			a.byRank[w] = append(a.byRank[w], ev)
		case tracking.StrideMismatch:
			a.strideMismatch(ev.Origin, c.Stride)
		case tracking.NotTracked:
			if c.Step != tracking.StepAdd {
				// Perhaps a request this replica routed, finished by a
				// client through the peer: the scheduler owns those.
				ctx.Send(a.scheduler, &messages.PeerStep{Event: ev})
			}
		}
	}
	for _, w := range order {
		run := a.byRank[w]
		delete(a.byRank, w)
		if len(run) == 1 {
			ctx.Send(a.ranks.pids[w], run[0])
		} else {
			ctx.Send(a.ranks.pids[w], &messages.SequenceEventBatch{Events: run})
		}
	}
	if len(sessionWrites) > 0 {
		// The scheduler owns the session table.
		ctx.Send(a.scheduler, &messages.SessionUpdates{Events: sessionWrites})
	}
}

func (a *replicationActor) strideMismatch(origin string, peerStride int) {
	a.obs.StrideMismatch()
	if a.strideWarned[origin] {
		return // once per peer; the counter keeps the rate
	}
	a.strideWarned[origin] = true
	a.log.Warn("dropped a peer's add: different router-active-sequence-stride",
		"origin", origin, "peer_stride", max(peerStride, 1), "stride", a.cfg.Sequence.EffectiveStride())
}

func (a *replicationActor) dropOrigin(ctx actor.Context, origin string) {
	if origin == a.cfg.ReplicaID {
		return
	}
	a.remote.DropOrigin(origin)
	for _, w := range a.ranks.List {
		ctx.Send(a.ranks.pids[w], &messages.DropOrigin{Origin: origin})
	}
}

// replaceOrigin swaps what this replica holds for a peer with the peer's
// full state: every rank drops the origin's requests and restores those
// the state lists, with their start times and prefill progress.
func (a *replicationActor) replaceOrigin(ctx actor.Context, m *messages.ReplaceOrigin) {
	if m.Origin == a.cfg.ReplicaID {
		return
	}
	a.remote.DropOrigin(m.Origin)
	restore := map[kv.WorkerWithDpRank]*messages.RestoreOrigin{}
	stride := a.cfg.Sequence.EffectiveStride()
	for _, ev := range m.Events {
		c := decide.ChangeOf(ev)
		c.Origin = m.Origin // a full state speaks for its origin only
		w, out := a.remote.ApplyRemote(c, a.cfg.ReplicaID, stride, a.ranks.has)
		switch {
		case out == tracking.StrideMismatch:
			a.strideMismatch(m.Origin, c.Stride)
		case out != tracking.Apply:
		case c.Step == tracking.StepAdd:
			r := restore[w]
			if r == nil {
				r = &messages.RestoreOrigin{Origin: m.Origin}
				restore[w] = r
			}
			r.Adds = append(r.Adds, ev.GetAdd())
		case c.Step == tracking.StepPrefillCompleted:
			if r := restore[w]; r != nil {
				r.PrefillDone = append(r.PrefillDone, c.RequestID)
			}
		}
	}
	for _, w := range a.ranks.List {
		if r := restore[w]; r != nil {
			ctx.Send(a.ranks.pids[w], r)
		} else {
			ctx.Send(a.ranks.pids[w], &messages.DropOrigin{Origin: m.Origin})
		}
	}
}

// lifecycle finishes a step a client sent here for a request a peer
// routed (the scheduler forwards what it does not own), and gossips it so
// the peer and everyone else apply it too.
func (a *replicationActor) lifecycle(ctx actor.Context, m *messages.RequestLifecycle) {
	e, ok := a.remote.Lookup(m.RequestId)
	pid := a.ranks.pids[e.Rank]
	if !ok || pid == nil {
		ctx.Respond(&messages.LifecycleReply{RequestId: m.RequestId, Found: false})
		return
	}
	if _, ok := m.Step.(*messages.RequestLifecycle_Free); ok {
		a.remote.Untrack(m.RequestId)
	}
	a.gossip.step(ctx, pid, m)
	ctx.Respond(&messages.LifecycleReply{RequestId: m.RequestId, Found: true})
}
