package actors

import (
	"context"
	"errors"
	"fmt"
	"github.com/kvrouter/kvrouter/receipts"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sequence"
	"github.com/kvrouter/kvrouter/sessions"
)

// Router is one replica's routing engine: the actor system and the
// entry points the service calls. All methods are safe for concurrent use.
type Router struct {
	cfg         Config
	dispatchers []*pinnedDispatcher
	system      *actor.ActorSystem
	shards      []*actor.PID
	scheduler   *actor.PID
	// decisions is the ring of recent route receipts (the scheduler
	// writes it; Decision reads it).
	decisions   *receipts.Ring
	registry    *actor.PID
	replication *actor.PID
	log         *slog.Logger

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
	gate     *tickGate // the scheduler's say in how often the ticker runs
	stopped  atomic.Bool
	// cancelTokens numbers route calls (RouteRequest.cancel_token).
	cancelTokens atomic.Uint64
	inboxes      *inboxes // reply addresses of the calls into the actors
	// Backlogs bound the shards' and the replication edge's mailboxes.
	shardBacklogs []*backlog
	replBacklog   *backlog
	digests       *digestGate // bounds the shards' time in index digests
	// trust is the index-trust actor (nil when trust is off); trustSnap
	// its last published verdicts, read without asking it.
	trust     *actor.PID
	trustSnap atomic.Pointer[trustSnapshot]
}

// Errors returned by Router methods; the HTTP layer maps them to codes.
// Those a pure package defines are its own sentinels.
var (
	ErrNoEligibleWorker = scheduling.ErrNoEligibleWorker
	ErrOverloaded       = scheduling.ErrOverloaded
	ErrUnknownRequest   = sequence.ErrUnknownRequest
	ErrBadRequest       = errors.New("bad request")
	// ErrLimit: a configured bound refused the call (registry size,
	// requests in flight).
	ErrLimit   = scheduling.ErrLimit
	ErrTimeout = errors.New("router did not answer in time")
	ErrStopped = errors.New("router stopped")
)

// RouteError is a failed routing decision with its queue figures.
type RouteError struct {
	Kind       error // one of the Err* sentinels
	Message    string
	QueueDepth int
	QueueLimit int
}

func (e *RouteError) Error() string { return e.Message }
func (e *RouteError) Unwrap() error { return e.Kind }

// Start builds the actor system: K shard actors under a restarting
// guardian, the scheduler (decisions), the replication edge (peers'
// state) and the registry, which spawns one sequence actor per worker
// rank as workers register.
func Start(cfg Config) (*Router, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("router config: %w", err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return cfg.Logger.With("component", "protoactor")
	}))
	r := &Router{cfg: cfg, system: sys, log: cfg.Logger, stop: make(chan struct{}), done: make(chan struct{}), inboxes: newInboxes(sys),
		digests: newDigestGate(), decisions: receipts.New(cfg.DecisionRingEntries, cfg.DecisionRingBytes)}
	guardian := sys.Root.WithGuardian(actor.NewOneForOneStrategy(10, 10*time.Second, actor.DefaultDecider))
	// The decision path's actors keep their goroutines (pinnedDispatcher):
	// one for the scheduler, one for the replication edge, one per shard,
	// one for the registry.
	turns := cfg.shardTurns
	if turns <= 0 {
		turns = shardTurns
	}
	shardDispatch := newPinnedDispatcher(cfg.shardCount(), turns)
	schedDispatch := newPinnedDispatcher(1, defaultThroughput)
	replDispatch := newPinnedDispatcher(1, defaultThroughput)
	regDispatch := newPinnedDispatcher(1, defaultThroughput)
	r.dispatchers = []*pinnedDispatcher{shardDispatch, schedDispatch, replDispatch, regDispatch}
	// router_max_tree_size bounds the whole replica's predicted tree, so
	// each shard gets its share.
	shardIndex := cfg.Index
	shardIndex.MaxTreeSize = max(cfg.Index.MaxTreeSize/cfg.shardCount(), 1)
	shardIndex.HoldBlocks = max(cfg.Index.HoldBlocks/cfg.shardCount(), 1)
	var trustPID *actor.PID
	if cfg.trustOn() {
		trustPID = actor.NewPID(sys.Address(), "trust")
	}
	for i := 0; i < cfg.shardCount(); i++ {
		gate, err := newEventGate(shardIndex, cfg.Observer)
		if err != nil {
			return nil, err
		}
		st := &shardState{id: uint32(i), approx: !cfg.UseKVEvents, cfg: shardIndex, log: cfg.Logger, obs: cfg.Observer,
			gate: gate, backlog: newBacklog(cfg.ShardBacklog),
			trust: shardTrust{pid: trustPID, ttl: cfg.Index.fallbackTTL(cfg.Trust)}}
		r.shardBacklogs = append(r.shardBacklogs, st.backlog)
		r.shards = append(r.shards, guardian.Spawn(newShardProps(st, shardDispatch, cfg.shardMiddleware...)))
	}
	// The scheduler and the replication edge address each other, so both
	// are spawned under names known before either exists.
	g := &gossiper{replica: cfg.ReplicaID, publish: cfg.Publish}
	r.gate = newTickGate()
	schedulerPID := actor.NewPID(sys.Address(), "scheduler")
	replicationPID := actor.NewPID(sys.Address(), "replication")
	registryPID := actor.NewPID(sys.Address(), "registry")
	var err error
	if r.scheduler, err = sys.Root.SpawnNamed(newSchedulerProps(cfg, r.decisions, g, r.gate, r.shards, replicationPID, registryPID, trustPID, schedDispatch), schedulerPID.Id); err != nil {
		return nil, fmt.Errorf("spawn scheduler: %w", err)
	}
	r.replBacklog = newBacklog(cfg.ReplicationBacklog)
	if r.replication, err = sys.Root.SpawnNamed(newReplicationProps(cfg, g, schedulerPID, registryPID, r.replBacklog, replDispatch), replicationPID.Id); err != nil {
		return nil, fmt.Errorf("spawn replication: %w", err)
	}
	if r.registry, err = sys.Root.SpawnNamed(newRegistryProps(cfg, r.shards, r.scheduler, r.replication).
		Configure(actor.WithDispatcher(regDispatch)), registryPID.Id); err != nil {
		return nil, fmt.Errorf("spawn registry: %w", err)
	}
	if trustPID != nil {
		props := newTrustProps(cfg.Trust, r.shards, r.scheduler, &r.trustSnap, cfg.Logger)
		if r.trust, err = sys.Root.SpawnNamed(props, trustPID.Id); err != nil {
			return nil, fmt.Errorf("spawn index trust: %w", err)
		}
	}
	go r.ticker()
	return r, nil
}

func (r *Router) ticker() {
	defer close(r.done)
	wait := r.gate.period(r.cfg.TickInterval)
	t := time.NewTimer(wait)
	defer t.Stop()
	due := time.Now().Add(wait)
	var registryTicked time.Time
	for {
		select {
		case <-r.stop:
			return
		case <-r.gate.wake:
			// The scheduler turned busy: its next tick is due within one
			// TickInterval, not at the end of an idle period. Only ever
			// brought forward: a scheduler turning busy and idle faster
			// than TickInterval would otherwise push the tick back forever.
			if soon := time.Now().Add(r.cfg.TickInterval); soon.Before(due) {
				t.Reset(r.cfg.TickInterval)
				due = soon
			}
		case now := <-t.C:
			tick := &messages.Tick{UnixNano: now.UnixNano()}
			r.system.Root.Send(r.scheduler, tick)
			// The registry's housekeeping (heartbeat expiry, the ranks'
			// stale sweep) runs once a second; waking it 50 times a
			// second was most of an idle replica's CPU.
			if now.Sub(registryTicked) >= time.Second {
				registryTicked = now
				r.system.Root.Send(r.registry, tick)
				if r.trust != nil {
					r.system.Root.Send(r.trust, tick)
				}
			}
			wait = r.gate.period(r.cfg.TickInterval)
			t.Reset(wait)
			due = time.Now().Add(wait)
		}
	}
}

// Stop stops the actors. Pending calls fail with ErrStopped or time out.
func (r *Router) Stop() {
	r.stopOnce.Do(func() {
		r.stopped.Store(true)
		close(r.stop)
		<-r.done
		pids := append([]*actor.PID{r.registry, r.replication, r.scheduler}, r.shards...)
		if r.trust != nil {
			pids = append(pids, r.trust)
		}
		for _, pid := range pids {
			if err := r.system.Root.StopFuture(pid).Wait(); err != nil {
				r.log.Warn("actor did not stop in time", "actor", pid.Id, "err", err)
			}
		}
		r.system.Shutdown()
		for _, d := range r.dispatchers {
			d.Close()
		}
	})
}

// Config returns the router's configuration.
func (r *Router) Config() Config { return r.cfg }

// ApplyEvent hands a KV-cache event to the shard that owns its worker.
// It never blocks.
func (r *Router) ApplyEvent(ev *kv.Event) {
	if r.stopped.Load() {
		return
	}
	ev = r.cfg.Index.SharedStores.Classify(ev)
	i := shardOf(ev.Worker.WorkerID, len(r.shards))
	if !r.shardBacklogs[i].wait(1, r.cfg.BackpressureWait) {
		r.cfg.Observer.BacklogDropped("shard")
		return
	}
	r.system.Root.Send(r.shards[i], events.ToProto(ev))
}

// EventBacklog is how many KV events were handed to the shards and not
// yet applied (ingest lag, in events).
func (r *Router) EventBacklog() int {
	n := int64(0)
	for _, b := range r.shardBacklogs {
		n += b.n.Load()
	}
	return int(n)
}

// registerTimeout bounds how long RegisterWorker waits for the registry.
const registerTimeout = 5 * time.Second

// RegisterWorker adds or refreshes a worker (a heartbeat, or a static
// registration that never expires). It returns once the scheduler has the
// worker's ranks queued ahead of anything the caller sends next, so a
// route right after a registration sees the worker. A registry at its
// limits refuses new workers with ErrLimit.
func (r *Router) RegisterWorker(hb *messages.WorkerHeartbeat, static bool) error {
	if err := r.checkRegistrable(hb); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), registerTimeout)
	defer cancel()
	_, err := r.ask(ctx, r.registry, &messages.WorkerUp{Worker: hb, Static: static, SeenUnixNano: time.Now().UnixNano()})
	if err != nil {
		return fmt.Errorf("register worker %d: %w", hb.WorkerId, err)
	}
	return nil
}

// AnnounceWorker is RegisterWorker without waiting: for heartbeats, which
// repeat, so a caller need not know when the table includes the worker,
// and for registering a whole fleet at once (announce all but the last,
// register the last). Announcements arriving together publish one rank
// table. A refusal (registry full) is logged and counted by the registry.
// A worker announced without static expires unless its heartbeats go on.
func (r *Router) AnnounceWorker(hb *messages.WorkerHeartbeat, static bool) error {
	if err := r.checkRegistrable(hb); err != nil {
		return err
	}
	if r.stopped.Load() {
		return ErrStopped
	}
	r.system.Root.Send(r.registry, &messages.WorkerUp{Worker: hb, Static: static, SeenUnixNano: time.Now().UnixNano()})
	return nil
}

// checkRegistrable refuses a declared shared cache store as a worker.
func (r *Router) checkRegistrable(hb *messages.WorkerHeartbeat) error {
	if r.cfg.Index.SharedStores.Holds(kv.WorkerID(hb.GetWorkerId())) {
		return fmt.Errorf("register worker %d: it is declared a shared cache store (shared-cache-workers), which is never a routing candidate: %w",
			hb.GetWorkerId(), ErrBadRequest)
	}
	return nil
}

// RemoveWorker drops a worker's candidates, requests and indexed blocks.
func (r *Router) RemoveWorker(id kv.WorkerID) {
	r.system.Root.Send(r.registry, &messages.RemoveWorker{WorkerId: uint64(id)})
	// A worker that was never registered may still have indexed blocks
	// (events can arrive before the first heartbeat).
	r.system.Root.Send(r.shards[shardOf(id, len(r.shards))], &messages.RemoveWorker{WorkerId: uint64(id)})
}

// ask sends a request to an actor and waits for the reply or ctx.
func (r *Router) ask(ctx context.Context, pid *actor.PID, msg any) (any, error) {
	if r.stopped.Load() {
		return nil, ErrStopped
	}
	timeout := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return nil, ErrTimeout
		}
	}
	res, ok := r.inboxes.call(r.system.Root, pid, msg, timeout)
	if !ok {
		return nil, ErrTimeout
	}
	if rerr, ok := res.(*messages.RouteError); ok {
		return nil, toRouteError(rerr)
	}
	return res, nil
}

func toRouteError(e *messages.RouteError) *RouteError {
	kind := ErrBadRequest
	switch e.Code {
	case messages.RouteErrorCode_ROUTE_ERROR_NO_ELIGIBLE_WORKER:
		kind = ErrNoEligibleWorker
	case messages.RouteErrorCode_ROUTE_ERROR_OVERLOADED:
		kind = ErrOverloaded
	case messages.RouteErrorCode_ROUTE_ERROR_UNKNOWN_REQUEST:
		kind = ErrUnknownRequest
	case messages.RouteErrorCode_ROUTE_ERROR_TIMEOUT:
		kind = ErrTimeout
	case messages.RouteErrorCode_ROUTE_ERROR_LIMIT:
		kind = ErrLimit
	case messages.RouteErrorCode_ROUTE_ERROR_CLIENT_LIMIT:
		kind = ErrClientLimit
	case messages.RouteErrorCode_ROUTE_ERROR_CANCELLED:
		kind = context.Canceled
	}
	return &RouteError{Kind: kind, Message: e.Message, QueueDepth: int(e.QueueDepth), QueueLimit: int(e.QueueLimit)}
}

// Decision returns the route receipt of request id from the ring of
// recent receipts (JSON), if it is still held.
func (r *Router) Decision(id string) ([]byte, bool) { return r.decisions.Get(id) }

// Route picks a (worker, dp rank) for a request. With UpdateStates the
// decision is recorded as an active request (free it with Free).
//
// It waits longer than a request may wait in the backpressure queue, so an
// overloaded fleet answers ErrOverloaded, not ErrTimeout. When ctx ends
// first (the client left), the scheduler is told: a decision in flight or
// queued is dropped, and one already recorded is freed, because nobody
// will receive its answer and free it.
func (r *Router) Route(ctx context.Context, req *messages.RouteRequest) (*messages.RouteReply, error) {
	if r.stopped.Load() {
		return nil, ErrStopped
	}
	token, id := r.cancelTokens.Add(1), req.RequestId
	req.CancelToken = token
	if req.Client == "" {
		req.Client = ClientFrom(ctx)
	}
	cancel := func() {
		r.system.Root.Send(r.scheduler, &messages.CancelRoute{CancelToken: token, RequestId: id})
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("route %q: client left: %w", id, context.Cause(ctx))
	}
	// The cancel is registered once the request is in the scheduler's
	// mailbox (call sends before it waits), so it can never overtake it.
	var stop func() bool
	res, ok := r.inboxes.callThen(r.system.Root, r.scheduler, req, r.routeWait(ctx), func() {
		stop = context.AfterFunc(ctx, cancel)
	})
	if !stop() {
		return nil, fmt.Errorf("route %q: client left: %w", id, context.Cause(ctx))
	}
	if !ok {
		cancel() // do not leave a decision behind that nobody waits for
		return nil, ErrTimeout
	}
	if rerr, ok := res.(*messages.RouteError); ok {
		return nil, toRouteError(rerr)
	}
	return res.(*messages.RouteReply), nil
}

// routeWait is how long Route waits for the scheduler: past the longest
// queue wait (plus a re-check's fan-out), or until ctx's deadline and a
// second more for the cancel to be answered, whichever is sooner.
func (r *Router) routeWait(ctx context.Context) time.Duration {
	wait := 30 * time.Second
	if r.cfg.MaxQueueWait > 0 {
		wait = r.cfg.MaxQueueWait + 2*r.cfg.DecisionTimeout + time.Second
	}
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, max(time.Until(dl), 0)+time.Second)
	}
	return wait
}

func (r *Router) lifecycle(ctx context.Context, m *messages.RequestLifecycle) error {
	res, err := r.ask(ctx, r.scheduler, m)
	if err != nil {
		return err
	}
	if !res.(*messages.LifecycleReply).Found {
		return &RouteError{Kind: ErrUnknownRequest, Message: fmt.Sprintf("request %q is not active", m.RequestId)}
	}
	return nil
}

// Gossiped waits until every change this replica gossiped before the call
// (a free, a prefill completion) was handed to each live peer, so a
// change acknowledged after it survives this replica's crash: the API
// layers call it before they acknowledge a free or a prefill completion.
// It returns at once without a cluster. The change is applied whatever it
// returns; an error (a peer slow or gone, ctx done) is counted and logged
// by the cluster, and anti-entropy repairs the peer.
func (r *Router) Gossiped(ctx context.Context) error {
	if r.cfg.Gossiped == nil {
		return nil
	}
	return r.cfg.Gossiped(ctx)
}

// MarkPrefillCompleted says a request produced its first token.
func (r *Router) MarkPrefillCompleted(ctx context.Context, id string) error {
	return r.lifecycle(ctx, &messages.RequestLifecycle{RequestId: id,
		Step: &messages.RequestLifecycle_PrefillCompleted{PrefillCompleted: &messages.MarkPrefillCompleted{RequestId: id}}})
}

// Free says a request finished (or failed); its blocks stop counting.
func (r *Router) Free(ctx context.Context, id string) error {
	return r.lifecycle(ctx, &messages.RequestLifecycle{RequestId: id,
		Step: &messages.RequestLifecycle_Free{Free: &messages.FreeRequest{RequestId: id}}})
}

// AddOutputBlock says a request generated another full block.
func (r *Router) AddOutputBlock(ctx context.Context, id string, decayFrac float64) error {
	return r.lifecycle(ctx, &messages.RequestLifecycle{RequestId: id,
		Step: &messages.RequestLifecycle_OutputBlock{OutputBlock: &messages.AddOutputBlock{RequestId: id, DecayFrac: decayFrac}}})
}

// OverlapScores reports every registered worker rank's cached prefix.
func (r *Router) OverlapScores(ctx context.Context, tokens []uint32, lora string) (*messages.OverlapScoresReply, error) {
	res, err := r.ask(ctx, r.scheduler, &messages.OverlapScoresQuery{TokenIds: tokens, LoraName: lora})
	if err != nil {
		return nil, err
	}
	return res.(*messages.OverlapScoresReply), nil
}

// PotentialLoads is Dynamo's get_potential_loads for a prospective prompt.
func (r *Router) PotentialLoads(ctx context.Context, tokens []uint32, lora string) (*messages.PotentialLoadsReply, error) {
	res, err := r.ask(ctx, r.scheduler, &messages.PotentialLoadsQuery{TokenIds: tokens, LoraName: lora})
	if err != nil {
		return nil, err
	}
	return res.(*messages.PotentialLoadsReply), nil
}

// Registry lists registered workers, with the queue depth and how many
// requests (own and peers') this replica tracks.
func (r *Router) Registry(ctx context.Context) (*messages.RegistryReply, error) {
	res, err := r.ask(ctx, r.registry, &messages.RegistryQuery{})
	if err != nil {
		return nil, err
	}
	reply := res.(*messages.RegistryReply)
	for _, pid := range []*actor.PID{r.scheduler, r.replication} {
		res, err := r.ask(ctx, pid, &messages.TrackedQuery{})
		if err != nil {
			return nil, err
		}
		t := res.(*messages.TrackedReply)
		reply.TrackedRequests += t.TrackedRequests
		reply.QueueDepth += t.QueueDepth
	}
	return reply, nil
}

// ShardStats asks every shard for its blocks and counters, and its index
// digest when digest is set (see digestGate: the walk is bounded).
func (r *Router) ShardStats(ctx context.Context, digest bool) ([]*messages.ShardStatsReply, error) {
	timeout := r.cfg.DecisionTimeout * 4
	if digest {
		release, err := r.digests.acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("index digest: %w", err)
		}
		defer release()
		timeout = r.askTimeout(ctx) // a walk of a big index takes seconds
	}
	futures := make([]*actor.Future, len(r.shards))
	for i, sh := range r.shards {
		futures[i] = r.system.Root.RequestFuture(sh, &messages.ShardStatsQuery{Digest: digest}, timeout)
	}
	out := make([]*messages.ShardStatsReply, 0, len(futures))
	for i, f := range futures {
		res, err := f.Result()
		if err != nil {
			return nil, fmt.Errorf("shard %d stats: %w", i, err)
		}
		out = append(out, res.(*messages.ShardStatsReply))
	}
	return out, nil
}

// Barrier waits until every shard has applied the events sent before it.
func (r *Router) Barrier(ctx context.Context) error {
	futures := make([]*actor.Future, len(r.shards))
	for i, sh := range r.shards {
		futures[i] = r.system.Root.RequestFuture(sh, &messages.Barrier{}, r.askTimeout(ctx))
	}
	for i, f := range futures {
		if _, err := f.Result(); err != nil {
			return fmt.Errorf("shard %d barrier: %w", i, err)
		}
	}
	return nil
}

// askTimeout is the context's remaining time, or 30 s without a deadline.
func (r *Router) askTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return 30 * time.Second
}

// dumpChunkEntries is how many index entries a shard dumps per message
// (whole ranks, so a chunk can hold more): a few milliseconds of its time,
// after which the lookups and events queued meanwhile go first.
const dumpChunkEntries = 4096

// DumpIndex returns the whole engine-event index as events that rebuild
// it, shard by shard, each in chunks of whole ranks (for snapshots; see
// index/dumpchunk.go for why ranks dumped at different moments still
// rebuild the index once the stream after the snapshot is replayed).
func (r *Router) DumpIndex(ctx context.Context) ([]*messages.KvEvent, error) {
	budget := uint32(dumpChunkEntries)
	if r.cfg.dumpChunkEntries > 0 {
		budget = uint32(r.cfg.dumpChunkEntries)
	}
	var out []*messages.KvEvent
	for i, sh := range r.shards {
		q := &messages.DumpQuery{MaxEntries: budget}
		for {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("dump shard %d: %w", i, err)
			}
			res, err := r.system.Root.RequestFuture(sh, q, r.askTimeout(ctx)).Result()
			if err != nil {
				return nil, fmt.Errorf("dump shard %d: %w", i, err)
			}
			chunk := res.(*messages.DumpChunk)
			out = append(out, chunk.Events...)
			if chunk.Done {
				break
			}
			q = &messages.DumpQuery{Tier: chunk.NextTier, Rank: chunk.NextRank, MaxEntries: budget}
		}
	}
	for i, ev := range out {
		ev.EventId = uint64(i) // numbered across the dump, as Dynamo's dump_tree_as_events does
	}
	return out, nil
}

// IndexDigest combines every shard's digest: two replicas that applied
// the same events report the same value.
func (r *Router) IndexDigest(ctx context.Context) (uint64, error) {
	stats, err := r.ShardStats(ctx, true)
	if err != nil {
		return 0, err
	}
	var d uint64
	for _, s := range stats {
		d += s.Digest // shards hold disjoint workers: a sum is order-free
	}
	return d, nil
}

// ActiveRequests lists active requests, of one origin replica or all, as
// the gossip events that recreate them, with this replica's own gossip
// sequence number at the time of the snapshot.
func (r *Router) ActiveRequests(ctx context.Context, origin *string) ([]*messages.SequenceEvent, uint64, error) {
	res, err := r.ask(ctx, r.scheduler, &messages.ActiveRequestsQuery{Origin: origin})
	if err != nil {
		return nil, 0, err
	}
	reply := res.(*messages.ActiveRequestsReply)
	return reply.Events, reply.Seq, nil
}

// ApplyRemote applies a peer replica's active-sequence change.
func (r *Router) ApplyRemote(ev *messages.SequenceEvent) {
	if !r.replBacklog.tryAdd(1) {
		r.cfg.Observer.BacklogDropped("replication")
		return
	}
	r.system.Root.Send(r.replication, ev)
}

// ApplyRemoteBatch applies a run of one peer's changes, in order, as one
// message. evs is copied: the caller may reuse the slice.
func (r *Router) ApplyRemoteBatch(evs []*messages.SequenceEvent) {
	if !r.replBacklog.tryAdd(len(evs)) {
		for range evs {
			r.cfg.Observer.BacklogDropped("replication")
		}
		return
	}
	r.system.Root.Send(r.replication, &messages.SequenceEventBatch{Events: slices.Clone(evs)})
}

// DropOrigin forgets every request a departed replica owned.
func (r *Router) DropOrigin(origin string) {
	r.system.Root.Send(r.replication, &messages.DropOrigin{Origin: origin})
}

// ReplaceOrigin swaps what we hold for a replica with its full state.
func (r *Router) ReplaceOrigin(origin string, evs []*messages.SequenceEvent) {
	r.system.Root.Send(r.replication, &messages.ReplaceOrigin{Origin: origin, Events: evs})
}

// EndSession ends a sticky session everywhere (the end is gossiped). It
// reports false for a session that is unknown, ended or expired, and an
// ErrBadRequest RouteError for an id the table refuses.
func (r *Router) EndSession(ctx context.Context, id string) (bool, error) {
	res, err := r.ask(ctx, r.scheduler, &messages.EndSession{SessionId: id})
	if err != nil {
		return false, err
	}
	reply := res.(*messages.EndSessionReply)
	if reply.Error != "" {
		return false, &RouteError{Kind: ErrBadRequest, Message: reply.Error}
	}
	return reply.Found, nil
}

// Session returns a session's live binding (nil: none), or an
// ErrBadRequest RouteError for an id the table refuses.
func (r *Router) Session(ctx context.Context, id string) (*messages.SessionReply, error) {
	res, err := r.ask(ctx, r.scheduler, &messages.SessionQuery{SessionId: id})
	if err != nil {
		return nil, err
	}
	reply := res.(*messages.SessionReply)
	if reply.Error != "" {
		return nil, &RouteError{Kind: ErrBadRequest, Message: reply.Error}
	}
	if !reply.Found {
		return nil, nil
	}
	return reply, nil
}

// SessionDigest is the session table's anti-entropy digest.
func (r *Router) SessionDigest(ctx context.Context) (sessions.Digest, error) {
	res, err := r.ask(ctx, r.scheduler, &messages.SessionDigestQuery{})
	if err != nil {
		return sessions.Digest{}, err
	}
	d := res.(*messages.SessionDigestReply)
	return sessions.Digest{Count: int(d.Count), Hash: d.Hash}, nil
}

// SessionSnapshot is the whole session table as session events, in no
// particular order.
func (r *Router) SessionSnapshot(ctx context.Context) ([]*messages.SequenceEvent, error) {
	res, err := r.ask(ctx, r.scheduler, &messages.SessionSnapshotQuery{})
	if err != nil {
		return nil, err
	}
	return res.(*messages.SessionTable).Entries, nil
}

// MergeSessions merges a peer's session table (anti-entropy); it does not
// block.
func (r *Router) MergeSessions(evs []*messages.SequenceEvent) {
	r.system.Root.Send(r.scheduler, &messages.SessionUpdates{Events: evs})
}
