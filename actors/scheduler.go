package actors

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// schedulerActor owns the worker registry, the request → worker map and
// every decision in flight. It never blocks: fan-outs are plain messages
// whose replies come back to it, matched by query id.
type schedulerActor struct {
	cfg Config
	log *slog.Logger
	// strideWarned: peers whose stride mismatch was logged already.
	strideWarned map[string]bool
	obs          Observer
	shards       []*actor.PID

	workers  map[kv.WorkerID]*workerEntry
	ranks    map[kv.WorkerWithDpRank]*rankEntry
	rankList []kv.WorkerWithDpRank // sorted: stable candidate order

	owners map[string]owner // routed request → where it runs
	// active counts owners per rank. A rank with none answers a load
	// query with zeros, so the scheduler skips asking it: with many
	// workers most decisions then fan out only to the busy ones.
	active  map[kv.WorkerWithDpRank]int
	pending map[uint64]*pending
	nextID  uint64
	queue   *scheduling.Queue[uint64] // payload: pending id
	// recheck is the queued request whose loads are being re-read; one
	// at a time so a burst of frees does not re-query the fleet N times.
	recheck *pending
	rng     *rand.Rand

	lastHousekeeping time.Time
	seq              uint64 // last gossip sequence number stamped
}

type workerEntry struct {
	hb       *messages.WorkerHeartbeat
	static   bool
	lastSeen time.Time
}

type rankEntry struct {
	pid             *actor.PID
	maxBatchedToken uint64
}

type owner struct {
	worker kv.WorkerWithDpRank
	origin string
}

func newSchedulerProps(cfg Config, shards []*actor.PID) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &schedulerActor{
			cfg:     cfg,
			log:     cfg.Logger,
			obs:     cfg.Observer,
			shards:  shards,
			workers: map[kv.WorkerID]*workerEntry{},
			ranks:   map[kv.WorkerWithDpRank]*rankEntry{},
			owners:  map[string]owner{},
			active:  map[kv.WorkerWithDpRank]int{},
			pending: map[uint64]*pending{},
			queue:   mustQueue(cfg.Scheduling),
			rng:     rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(10, 10*time.Second, actor.DefaultDecider)),
		actor.WithMailbox(actor.UnboundedPriority()))
}

func (s *schedulerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
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
	case *messages.ActiveRequestsReply:
		s.onRequests(ctx, m)
	case *messages.RequestLifecycle:
		s.lifecycle(ctx, m)
	case *messages.SequenceEvent:
		s.remote(ctx, m)
	case *messages.SequenceEventBatch:
		s.remoteBatch(ctx, m.Events)
	case *messages.DropOrigin:
		s.dropOrigin(ctx, m.Origin)
	case *messages.ReplaceOrigin:
		s.dropOrigin(ctx, m.Origin)
		for _, ev := range m.Events {
			s.remote(ctx, ev)
		}
	case *messages.StaleRequestsFreed:
		for _, id := range m.RequestIds {
			// Peers must see our own expiries, or their view of us keeps
			// disagreeing with our digest.
			if o, ok := s.owners[id]; ok && o.origin == s.cfg.ReplicaID {
				s.gossip(&messages.SequenceEvent{Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: id}}})
			}
			s.untrack(id)
		}
	case *messages.WorkerUp:
		s.workerUp(ctx, m)
	case *messages.RemoveWorker:
		s.removeWorker(ctx, kv.WorkerID(m.WorkerId), "removed")
	case *messages.RegistryQuery:
		ctx.Respond(s.registry())
	case *messages.Tick:
		s.tick(ctx, time.Unix(0, m.UnixNano))
	}
}

// workerUp registers a worker or refreshes its heartbeat.
func (s *schedulerActor) workerUp(ctx actor.Context, m *messages.WorkerUp) {
	hb := m.Worker
	id := kv.WorkerID(hb.WorkerId)
	seen := time.Unix(0, m.SeenUnixNano)
	if e, ok := s.workers[id]; ok && sameShape(e.hb, hb) {
		e.lastSeen = seen
		e.static = e.static || m.Static
		e.hb = hb
		return
	} else if ok {
		// The worker changed its dp ranks: rebuild its candidates.
		s.dropRanks(ctx, id)
	}
	size := max(hb.DataParallelSize, 1)
	s.workers[id] = &workerEntry{hb: hb, static: m.Static, lastSeen: seen}
	maxTokens := hb.MaxNumBatchedTokens
	if maxTokens == 0 {
		maxTokens = s.cfg.DefaultMaxNumBatchedTokens
	}
	for r := hb.DataParallelStartRank; r < hb.DataParallelStartRank+size; r++ {
		w := kv.WorkerWithDpRank{WorkerID: id, DpRank: r}
		pid := ctx.Spawn(newSequenceProps(w, s.cfg.ReplicaID, s.cfg.Sequence, s.cfg.StaleCheckInterval, s.log))
		s.ranks[w] = &rankEntry{pid: pid, maxBatchedToken: maxTokens}
	}
	s.rebuildRankList()
	s.log.Info("worker registered", "worker", id, "url", hb.Url, "dp_start", hb.DataParallelStartRank,
		"dp_size", size, "static", m.Static)
}

func sameShape(a, b *messages.WorkerHeartbeat) bool {
	return a.DataParallelStartRank == b.DataParallelStartRank &&
		max(a.DataParallelSize, 1) == max(b.DataParallelSize, 1)
}

func (s *schedulerActor) removeWorker(ctx actor.Context, id kv.WorkerID, why string) {
	if _, ok := s.workers[id]; !ok {
		return
	}
	delete(s.workers, id)
	s.dropRanks(ctx, id)
	s.rebuildRankList()
	for _, sh := range s.shards {
		ctx.Send(sh, &messages.RemoveWorker{WorkerId: uint64(id)})
	}
	s.log.Info("worker removed", "worker", id, "reason", why)
}

// dropRanks stops a worker's sequence actors and forgets its requests.
func (s *schedulerActor) dropRanks(ctx actor.Context, id kv.WorkerID) {
	for w, r := range s.ranks {
		if w.WorkerID == id {
			ctx.Stop(r.pid)
			delete(s.ranks, w)
		}
	}
	for rid, o := range s.owners {
		if o.worker.WorkerID == id {
			s.untrack(rid)
		}
	}
}

func (s *schedulerActor) rebuildRankList() {
	s.rankList = s.rankList[:0]
	for w := range s.ranks {
		s.rankList = append(s.rankList, w)
	}
	slices.SortFunc(s.rankList, func(a, b kv.WorkerWithDpRank) int {
		if a.WorkerID != b.WorkerID {
			if a.WorkerID < b.WorkerID {
				return -1
			}
			return 1
		}
		return int(a.DpRank) - int(b.DpRank)
	})
}

func (s *schedulerActor) registry() *messages.RegistryReply {
	reply := &messages.RegistryReply{QueueDepth: uint32(s.queue.Len()), TrackedRequests: uint64(len(s.owners))}
	for _, e := range s.workers {
		reply.Workers = append(reply.Workers, &messages.RegisteredWorker{
			Worker: e.hb, Static: e.static, LastSeenUnixNano: e.lastSeen.UnixNano(),
		})
	}
	slices.SortFunc(reply.Workers, func(a, b *messages.RegisteredWorker) int {
		return int(int64(a.Worker.WorkerId) - int64(b.Worker.WorkerId))
	})
	return reply
}

// lifecycle applies a local request's prefill-completed, output-block or
// free step, and gossips it.
func (s *schedulerActor) lifecycle(ctx actor.Context, m *messages.RequestLifecycle) {
	o, ok := s.owners[m.RequestId]
	if !ok {
		ctx.Respond(&messages.LifecycleReply{RequestId: m.RequestId, Found: false})
		return
	}
	r, ok := s.ranks[o.worker]
	if !ok {
		s.untrack(m.RequestId)
		ctx.Respond(&messages.LifecycleReply{RequestId: m.RequestId, Found: false})
		return
	}
	switch st := m.Step.(type) {
	case *messages.RequestLifecycle_PrefillCompleted:
		ctx.Send(r.pid, st.PrefillCompleted)
		s.gossip(&messages.SequenceEvent{Data: &messages.SequenceEvent_PrefillCompleted{PrefillCompleted: st.PrefillCompleted}})
		s.tryDequeue(ctx)
	case *messages.RequestLifecycle_Free:
		ctx.Send(r.pid, st.Free)
		s.untrack(m.RequestId)
		s.gossip(&messages.SequenceEvent{Data: &messages.SequenceEvent_Free{Free: st.Free}})
		s.tryDequeue(ctx)
	case *messages.RequestLifecycle_OutputBlock:
		// Output growth is not gossiped (as in Dynamo): it is frequent
		// and peers converge on the next add/free anyway.
		ctx.Send(r.pid, st.OutputBlock)
	}
	ctx.Respond(&messages.LifecycleReply{RequestId: m.RequestId, Found: true})
}

// gossip publishes a local change to peers, stamped with this replica's
// next sequence number. The scheduler stamps it (not the transport) so a
// state snapshot it takes is exact at a known sequence number.
func (s *schedulerActor) gossip(ev *messages.SequenceEvent) {
	if s.cfg.Publish != nil {
		s.seq++
		ev.Origin, ev.Seq = s.cfg.ReplicaID, s.seq
		s.cfg.Publish(ev)
	}
}

// remote applies an active-sequence change gossiped by a peer replica.
func (s *schedulerActor) remote(ctx actor.Context, ev *messages.SequenceEvent) {
	if w, ok := s.trackRemote(ev); ok {
		ctx.Send(s.ranks[w].pid, ev)
	}
}

// remoteBatch applies a run of peers' changes, giving each rank all of its
// events in one message: every replica applies every peer's decisions, so
// a mailbox operation per rank instead of per event is most of what a
// peer's share of a decision costs. A rank's events keep their order;
// ranks are independent.
func (s *schedulerActor) remoteBatch(ctx actor.Context, evs []*messages.SequenceEvent) {
	if len(evs) == 1 {
		s.remote(ctx, evs[0])
		return
	}
	byRank := make(map[kv.WorkerWithDpRank][]*messages.SequenceEvent)
	var order []kv.WorkerWithDpRank
	for _, ev := range evs {
		w, ok := s.trackRemote(ev)
		if !ok {
			continue
		}
		if _, seen := byRank[w]; !seen {
			order = append(order, w)
		}
		byRank[w] = append(byRank[w], ev)
	}
	for _, w := range order {
		if run := byRank[w]; len(run) == 1 {
			ctx.Send(s.ranks[w].pid, run[0])
		} else {
			ctx.Send(s.ranks[w].pid, &messages.SequenceEventBatch{Events: run})
		}
	}
}

// trackRemote updates the request→worker map for a peer's change and
// returns the rank whose sequence actor must apply it (false: nothing to
// apply — our own echo, an unknown worker or request, a stride mismatch).
func (s *schedulerActor) trackRemote(ev *messages.SequenceEvent) (kv.WorkerWithDpRank, bool) {
	if ev.Origin == s.cfg.ReplicaID {
		return kv.WorkerWithDpRank{}, false // our own echo
	}
	var w kv.WorkerWithDpRank
	switch d := ev.Data.(type) {
	case *messages.SequenceEvent_Add:
		id := d.Add.RequestId
		w = rankOf(d.Add.Worker)
		if _, known := s.ranks[w]; !known {
			return w, false // a worker we do not know (yet): nothing to load
		}
		if max(d.Add.Stride, 1) != uint32(s.cfg.Sequence.EffectiveStride()) {
			// Its hashes sample other blocks than ours: counting them
			// would corrupt the shared-prefix deduplication.
			s.obs.StrideMismatch()
			if s.strideWarned[ev.Origin] {
				return w, false
			}
			if s.strideWarned == nil {
				s.strideWarned = map[string]bool{}
			}
			s.strideWarned[ev.Origin] = true // once per peer; the counter keeps the rate
			s.log.Warn("dropped a peer's add: different router-active-sequence-stride",
				"origin", ev.Origin, "peer_stride", max(d.Add.Stride, 1), "stride", s.cfg.Sequence.EffectiveStride())
			return w, false
		}
		s.track(id, owner{worker: w, origin: ev.Origin})
	case *messages.SequenceEvent_PrefillCompleted:
		o, known := s.owners[d.PrefillCompleted.RequestId]
		if !known {
			return w, false
		}
		w = o.worker
	case *messages.SequenceEvent_Free:
		o, known := s.owners[d.Free.RequestId]
		if !known {
			return w, false
		}
		w = o.worker
		s.untrack(d.Free.RequestId)
	default:
		return w, false
	}
	_, ok := s.ranks[w]
	return w, ok
}

func (s *schedulerActor) dropOrigin(ctx actor.Context, origin string) {
	if origin == s.cfg.ReplicaID {
		return
	}
	for id, o := range s.owners {
		if o.origin == origin {
			s.untrack(id)
		}
	}
	for _, r := range s.ranks {
		ctx.Send(r.pid, &messages.DropOrigin{Origin: origin})
	}
	s.tryDequeue(ctx)
}

// tick runs housekeeping: decision timeouts, queue waits and retries,
// heartbeat expiry, and forwards time to shards and sequence actors.
func (s *schedulerActor) tick(ctx actor.Context, now time.Time) {
	for _, p := range s.pending {
		if !p.queued && now.After(p.deadline) {
			s.timeout(ctx, p)
		}
	}
	s.expireQueue(ctx, now)
	s.tryDequeue(ctx)
	s.obs.QueueDepth(s.queue.Len())
	// The rest needs only second resolution; forwarding every tick to
	// every actor would cost more than the decisions themselves.
	if now.Sub(s.lastHousekeeping) < time.Second {
		return
	}
	s.lastHousekeeping = now
	for id, e := range s.workers {
		if !e.static && s.cfg.HeartbeatTimeout > 0 && now.Sub(e.lastSeen) > s.cfg.HeartbeatTimeout {
			s.removeWorker(ctx, id, "heartbeat timeout")
		}
	}
	t := &messages.Tick{UnixNano: now.UnixNano()}
	for _, sh := range s.shards {
		ctx.Send(sh, t)
	}
	for _, r := range s.ranks {
		ctx.Send(r.pid, t)
	}
}

// mustQueue builds the backpressure queue; Config.Validate has already
// checked the policy and the limit.
func mustQueue(cfg scheduling.Config) *scheduling.Queue[uint64] {
	q, err := scheduling.NewQueue[uint64](cfg.RouterQueuePolicy, cfg.MaxQueueLength)
	if err != nil {
		panic(fmt.Sprintf("queue config passed validation but was refused: %v", err))
	}
	return q
}

// track and untrack are the only writers of owners, keeping active in
// step with it.
func (s *schedulerActor) track(id string, o owner) {
	s.untrack(id)
	s.owners[id] = o
	s.active[o.worker]++
}

func (s *schedulerActor) untrack(id string) {
	o, ok := s.owners[id]
	if !ok {
		return
	}
	delete(s.owners, id)
	if s.active[o.worker]--; s.active[o.worker] <= 0 {
		delete(s.active, o.worker)
	}
}
