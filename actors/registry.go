package actors

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/registry"
)

// registryActor owns the worker registry: it turns heartbeats, static
// registrations and removals into ranks, spawns and stops one sequence
// actor per rank, expires workers whose heartbeats stopped, and publishes
// the rank set to the scheduler and the replication edge on every change.
// It also forwards the once-a-second housekeeping tick to the shards and
// the sequence actors, which it knows.
type registryActor struct {
	cfg         Config
	log         *slog.Logger
	reg         *registry.Registry[*messages.WorkerHeartbeat]
	pids        map[kv.WorkerWithDpRank]*actor.PID
	shards      []*actor.PID
	scheduler   *actor.PID
	replication *actor.PID
	lastTick    time.Time
	// dirty: the registry changed since the last published table; a
	// PublishRankTable is queued (flushScheduled) and waiting holds the
	// callers whose WorkerUp it will answer.
	dirty, flushScheduled bool
	waiting               []*actor.PID
	published             uint64 // rank tables sent
}

func newRegistryProps(cfg Config, shards []*actor.PID, scheduler, replication *actor.PID) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &registryActor{
			cfg: cfg, log: cfg.Logger.With("component", "registry"),
			reg: registry.New[*messages.WorkerHeartbeat](cfg.DefaultMaxNumBatchedTokens,
				registry.Limits{MaxWorkers: cfg.MaxWorkers, MaxRanks: cfg.MaxRanks}),
			pids:   map[kv.WorkerWithDpRank]*actor.PID{},
			shards: shards, scheduler: scheduler, replication: replication,
		}
	})
}

func (a *registryActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.WorkerUp:
		a.workerUp(ctx, m)
	case *messages.RankTableQuery:
		a.publish(ctx)
	case *messages.PublishRankTable:
		a.flushScheduled = false
		if a.dirty {
			a.publish(ctx)
		}
	case *messages.RemoveWorker:
		a.remove(ctx, kv.WorkerID(m.WorkerId), "removed")
	case *messages.WorkerCondition:
		a.condition(ctx, m)
	case *messages.RegistryQuery:
		ctx.Respond(a.workers())
	case *messages.Tick:
		a.tick(ctx, time.Unix(0, m.UnixNano))
	}
}

func shapeOf(hb *messages.WorkerHeartbeat) registry.Shape {
	return registry.Shape{DpStart: hb.DataParallelStartRank, DpSize: hb.DataParallelSize,
		MaxNumBatchedTokens: hb.MaxNumBatchedTokens, Role: roleOf(hb.Role)}
}

// roleOf maps a wire role to kv.Role; a value this build does not know
// counts as both (the worker stays routable as before roles existed).
func roleOf(r messages.WorkerRole) kv.Role {
	if r < 0 || kv.Role(r) >= kv.NumRoles {
		return kv.RoleBoth
	}
	return kv.Role(r)
}

// workerUp registers or refreshes a worker. A change is published with
// the next rank table, which waits until the registrations queued now are
// applied (PublishRankTable): registering N workers at once publishes
// one table, not N tables of up to N ranks. The reply waits for that
// table, so a caller that waits for it knows its next route sees the
// worker.
func (a *registryActor) workerUp(ctx actor.Context, m *messages.WorkerUp) {
	hb := m.Worker
	id := kv.WorkerID(hb.WorkerId)
	budget, role := a.reg.Budget(id), a.reg.Role(id)
	ch, err := a.reg.Upsert(id, shapeOf(hb), hb, m.Static, time.Unix(0, m.SeenUnixNano))
	if err != nil {
		a.cfg.Observer.WorkerRejected("registry_full")
		a.log.Warn("worker refused", "worker", id, "url", hb.Url, "err", err)
		if ctx.Sender() != nil {
			ctx.Respond(decide.RouteErr(messages.RouteErrorCode_ROUTE_ERROR_LIMIT, "%v", err))
		}
		return
	}
	a.applyChange(ctx, ch)
	if !ch.Empty() {
		a.log.Info("worker registered", "worker", id, "url", hb.Url, "dp_start", hb.DataParallelStartRank,
			"dp_size", max(hb.DataParallelSize, 1), "static", m.Static, "role", roleOf(hb.Role).String())
	}
	if !ch.Empty() || budget != a.reg.Budget(id) || role != a.reg.Role(id) {
		a.dirty = true
		if !a.flushScheduled {
			a.flushScheduled = true
			ctx.Send(ctx.Self(), &messages.PublishRankTable{})
		}
	}
	if ctx.Sender() == nil {
		return
	}
	if a.dirty {
		// Answered with the table that includes this worker (and any
		// change queued before it).
		a.waiting = append(a.waiting, ctx.Sender())
		return
	}
	ctx.Respond(&messages.WorkerUpReply{})
}

func (a *registryActor) remove(ctx actor.Context, id kv.WorkerID, why string) {
	ch, ok := a.reg.Remove(id)
	if !ok {
		return
	}
	a.applyChange(ctx, ch)
	for _, sh := range a.shards {
		ctx.Send(sh, &messages.RemoveWorker{WorkerId: uint64(id)})
	}
	a.publish(ctx)
	a.log.Info("worker removed", "worker", id, "reason", why)
}

// applyChange stops the sequence actors of removed ranks (their requests
// go with them) and spawns those of added ranks.
func (a *registryActor) applyChange(ctx actor.Context, ch registry.Change) {
	for _, w := range ch.Removed {
		if pid, ok := a.pids[w]; ok {
			ctx.Stop(pid)
			delete(a.pids, w)
		}
	}
	for _, w := range ch.Added {
		a.pids[w] = ctx.Spawn(newSequenceProps(w, a.cfg, a.scheduler, a.replication))
	}
}

// condition sets or clears a worker's busy, unhealthy or draining
// condition and republishes the rank table when a rank's state changed.
func (a *registryActor) condition(ctx actor.Context, m *messages.WorkerCondition) {
	id := kv.WorkerID(m.WorkerId)
	var changed, known bool
	switch m.Condition {
	case messages.WorkerState_WORKER_STATE_BUSY:
		changed, known = a.reg.SetBusy(id, m.On, m.DpRanks)
	case messages.WorkerState_WORKER_STATE_UNHEALTHY:
		changed, known = a.reg.SetUnhealthy(id, m.On)
	case messages.WorkerState_WORKER_STATE_DRAINING:
		now := time.Now()
		if m.NowUnixNano != 0 {
			now = time.Unix(0, m.NowUnixNano)
		}
		changed, known = a.reg.SetDraining(id, m.On, now)
	}
	if changed {
		a.log.Info("worker condition", "worker", id, "condition", kv.WorkerState(m.Condition).String(), "on", m.On,
			"dp_ranks", m.DpRanks, "reason", m.Reason)
		a.publish(ctx)
	}
	if ctx.Sender() != nil {
		ctx.Respond(&messages.WorkerConditionReply{Known: known, Changed: changed})
	}
}

func (a *registryActor) table() *messages.RankTable {
	ranks := a.reg.Ranks()
	t := &messages.RankTable{Ranks: make([]*messages.RankEntry, 0, len(ranks))}
	for _, w := range ranks {
		var kvBlocks uint64 // each rank of a worker has the announced cache
		if info, _ := a.reg.Info(w.WorkerID); info != nil {
			kvBlocks = info.TotalKvBlocks
		}
		t.Ranks = append(t.Ranks, &messages.RankEntry{
			Worker: rankMsg(w), Pid: a.pids[w].Id, MaxNumBatchedTokens: a.reg.Budget(w.WorkerID),
			State: messages.WorkerState(a.reg.State(w)), TotalKvBlocks: kvBlocks,
			Role: messages.WorkerRole(a.reg.Role(w.WorkerID)),
		})
	}
	return t
}

// publish sends the rank table to its readers, then answers the
// registrations that waited for it.
func (a *registryActor) publish(ctx actor.Context) {
	t := a.table()
	ctx.Send(a.scheduler, t)
	ctx.Send(a.replication, t)
	for _, sh := range a.shards {
		ctx.Send(sh, t) // shards apply held events of workers that registered
	}
	a.dirty = false
	a.published++
	for _, pid := range a.waiting {
		ctx.Send(pid, &messages.WorkerUpReply{})
	}
	clear(a.waiting)
	a.waiting = a.waiting[:0]
}

func (a *registryActor) workers() *messages.RegistryReply {
	reply := &messages.RegistryReply{Digest: a.reg.Digest(), TablesPublished: a.published}
	for _, w := range a.reg.Workers() {
		rw := &messages.RegisteredWorker{
			Worker: w.Info, Static: w.Static, LastSeenUnixNano: w.LastSeen.UnixNano(),
			Draining: w.Draining, Unhealthy: w.Unhealthy, BusyRanks: w.BusyRanks,
		}
		if w.Draining {
			rw.DrainingSinceUnixNano = w.DrainingSince.UnixNano()
		}
		reply.Workers = append(reply.Workers, rw)
	}
	return reply
}

// tick expires silent workers and hands time to the shards and sequence
// actors, once a second: forwarding every scheduler tick to every actor
// would cost more than the decisions themselves.
func (a *registryActor) tick(ctx actor.Context, now time.Time) {
	if now.Sub(a.lastTick) < time.Second {
		return
	}
	a.lastTick = now
	for _, id := range a.reg.Expired(now, a.cfg.HeartbeatTimeout) {
		a.remove(ctx, id, "heartbeat timeout")
	}
	for _, id := range a.reg.DrainExpired(now, a.cfg.DrainGrace) {
		a.remove(ctx, id, "drained")
	}
	t := &messages.Tick{UnixNano: now.UnixNano()}
	for _, sh := range a.shards {
		ctx.Send(sh, t)
	}
	for _, pid := range a.pids {
		ctx.Send(pid, t)
	}
}
