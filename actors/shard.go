package actors

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// shardState is the index of one shard. It lives outside the actor
// instance so that a restart after a panic keeps it: the restarted actor
// checks the invariants and keeps the index if it is intact, or resets it
// and reports the loss (never silently empty).
type shardState struct {
	id     uint32
	approx bool
	idx    *index.Indexer // the engines' truth (event mode)
	// pred predicts blocks from this replica's own routing decisions: the
	// whole index in approximate mode, and in event mode (with a predicted
	// TTL) a short-lived side index covering the gap between routing a
	// prompt and its KV events arriving, which would otherwise scatter a
	// burst of same-prefix requests over idle workers. Scores take the max
	// of both, as Dynamo's predict-on-route indexer does.
	pred *index.Approx
	// gate holds the events of workers that have not registered.
	gate *eventGate
	// backlog counts KV events sent to this shard and not yet applied.
	backlog  *backlog
	restarts uint64
	resets   uint64
	// scratch is what each KvEvent is decoded into (apply); nothing keeps
	// it past the message (the holdback keeps a copy).
	scratch kv.Event
	// digests counts index digest walks (exported as index_digests, so
	// it is visible that scrapes do not walk the index).
	digests uint64
	// matches and packed are a lookup's scratch (the actor is the only
	// reader): the reply copies out of them before the next message.
	matches index.TieredMatches
	packed  []index.RankMatch
	cfg     IndexConfig
	log     *slog.Logger
	obs     Observer
	// drops rate-limits the WARN line of every event the shard drops.
	drops dropLog
	trust shardTrust
}

type shardActor struct {
	st  *shardState
	ctx actor.Context // the message being handled's (trust reports)
}

// shardTurns is how many messages a shard handles before it yields its
// processor (runtime.Gosched once more than this many were handled;
// protoactor's default is 300). A shard applying a backlog of KV events
// would otherwise hold a processor until the runtime preempts it (10 ms),
// and every goroutine a lookup hops through — the caller, the scheduler,
// the other shard — waits in the run queue that long; yielding every
// other message bounds that wait by a couple of events' apply. A yield
// costs a fraction of a microsecond, an event tens of microseconds
// (BenchmarkShardIngest compares the ingest cost with the default).
const shardTurns = 1

// newShardProps builds a shard's props; middleware is a test seam (the
// package's tests inject crashes and stalls with it; production passes
// none).
func newShardProps(st *shardState, d actor.Dispatcher, middleware ...actor.ReceiverMiddleware) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &shardActor{st: st} },
		actor.WithMailbox(priorityMailbox()), actor.WithDispatcher(d),
		actor.WithReceiverMiddleware(middleware...))
}

func (a *shardActor) Receive(ctx actor.Context) {
	st := a.st
	a.ctx = ctx
	switch m := ctx.Message().(type) {
	case *trustTable:
		st.trust.setTable(m)
	case *actor.Started:
		a.ensureIndex()
	case *actor.Restarting:
		st.restarts++
	case *messages.KvEvent:
		st.backlog.done(1)
		a.apply(m)
	case *messages.KvEventBatch:
		for _, ev := range m.Events {
			a.apply(ev)
		}
	case *messages.RankTable:
		for _, ev := range st.gate.registered(m) {
			// A held event is checked against the ranks the worker
			// registered with, as a live one is.
			if st.gate.rankOf(ev) == unknownRank {
				a.drop(&ev, reasonUnknownRank, nil)
				continue
			}
			a.index(&ev)
		}
	case *messages.RemoveWorker:
		st.gate.forget(kv.WorkerID(m.WorkerId))
		a.tree().RemoveWorker(kv.WorkerID(m.WorkerId))
		if st.pred != nil && !st.approx {
			st.pred.RemoveWorker(kv.WorkerID(m.WorkerId))
		}
	case *messages.ScoreRequest:
		ctx.Respond(a.score(m))
	case *messages.RoutingDecision:
		if st.pred != nil {
			w := kv.WorkerWithDpRank{WorkerID: kv.WorkerID(m.Worker.GetWorkerId()), DpRank: m.Worker.GetDpRank()}
			if err := st.pred.RecordDecision(w, kv.AsLocalHashes(m.LocalHashes), time.Now()); err != nil {
				st.obs.EventDropped("prediction_" + index.ErrorReason(err))
			}
		}
	case *messages.Tick:
		if st.pred != nil {
			st.pred.Expire(time.Unix(0, m.UnixNano))
		}
		if expired := st.gate.expire(time.Unix(0, m.UnixNano)); len(expired) > 0 {
			st.drops.warnRanks(st.log, st.id, "unregistered_worker_expired", expired)
		}
		st.trust.flush(ctx, m.UnixNano)
	case *messages.ShardStatsQuery:
		ctx.Respond(a.stats(m.Digest))
	case *messages.Barrier:
		ctx.Respond(m)
	case *messages.DumpQuery:
		ctx.Respond(a.dumpChunk(m))
	}
}

// ensureIndex builds the index on first start and validates it after a
// restart.
func (a *shardActor) ensureIndex() {
	st := a.st
	if st.idx == nil && st.pred == nil {
		a.reset()
		return
	}
	if err := a.tree().CheckInvariants(); err != nil {
		st.resets++
		st.log.Error("shard index corrupt after restart; reset, workers must resync",
			"shard", st.id, "err", err)
		st.obs.ShardRestarted(st.id, false)
		a.reset()
		return
	}
	st.log.Warn("shard restarted; index intact", "shard", st.id, "restarts", st.restarts)
	st.obs.ShardRestarted(st.id, true)
}

func (a *shardActor) reset() {
	st := a.st
	st.idx, st.pred = nil, nil
	switch {
	case st.approx:
		st.pred = index.NewApprox(index.ApproxConfig{
			TTL: st.cfg.TTL, MaxTreeSize: st.cfg.MaxTreeSize, PruneTargetRatio: st.cfg.PruneTargetRatio,
		})
	default:
		st.idx = index.New()
		if ttl := st.predictedTTL(); ttl > 0 {
			st.pred = index.NewApprox(index.ApproxConfig{
				TTL: ttl, MaxTreeSize: st.cfg.MaxTreeSize, PruneTargetRatio: st.cfg.PruneTargetRatio,
			})
		}
	}
}

// predictedTTL is the lifetime of event mode's predictions: the
// predicted TTL when set, else the trust fallback's (0: no predictions).
func (st *shardState) predictedTTL() time.Duration {
	if st.cfg.PredictedTTL > 0 {
		return st.cfg.PredictedTTL
	}
	if st.trust.on() {
		return st.trust.ttl
	}
	return 0
}

// mergePredictions: event mode's predictions extend every rank's index
// matches (router-predicted-ttl-secs); without it they serve only the
// untrusted ranks.
func (st *shardState) mergePredictions() bool { return st.cfg.PredictedTTL > 0 }

// tree is the structure the shard answers from in either mode.
func (a *shardActor) tree() indexView {
	if a.st.approx {
		return a.st.pred
	}
	return a.st.idx
}

func (a *shardActor) apply(m *messages.KvEvent) {
	ev := &a.st.scratch
	defer a.trimScratch()
	if err := events.FromProtoInto(m, ev); err != nil {
		// ev names the worker and rank when the message had them.
		a.drop(ev, "invalid", err)
		return
	}
	if a.st.approx {
		// Approximate mode predicts the cache from routing decisions;
		// engine events are not expected and would mix two truths.
		a.drop(ev, "approx_mode", nil)
		return
	}
	a.st.trust.noteEvent(ev.Worker)
	switch a.st.gate.admit(*ev) {
	case held:
		return // applied when the worker registers, or dropped if it never does
	case holdFull:
		a.drop(ev, "unregistered_worker", nil)
		return
	case unknownRank:
		// A registered worker's event from a dp rank it does not have
		// (rank 5 of a dp=2 worker): indexed, it would sit under a rank
		// nobody routes to, so it is refused.
		a.drop(ev, reasonUnknownRank, nil)
		return
	}
	a.index(ev)
}

// drop counts an event the shard does not apply, by reason, and logs it
// (rate-limited) naming its worker and rank.
func (a *shardActor) drop(ev *kv.Event, reason string, err error) {
	a.st.obs.EventDropped(reason)
	a.st.drops.warn(a.st.log, a.st.id, ev, reason, err)
}

// maxScratchBlocks bounds the scratch event's arrays between events: one
// huge event must not pin its size for the shard's life.
const maxScratchBlocks = 4096

// trimScratch lets go of a scratch array grown past maxScratchBlocks.
func (a *shardActor) trimScratch() {
	ev := &a.st.scratch
	if cap(ev.Blocks) > maxScratchBlocks {
		ev.Blocks = nil
	}
	if cap(ev.Removed) > maxScratchBlocks {
		ev.Removed = nil
	}
}

// index applies an event of a registered worker to the engines' index.
func (a *shardActor) index(ev *kv.Event) {
	err := a.st.idx.Apply(ev)
	a.st.trust.noteApplied(a.ctx, ev, err)
	if err != nil {
		a.drop(ev, index.ErrorReason(err), err)
		return
	}
	if ev.Kind == kv.EventCleared && a.st.pred != nil {
		// What this replica routed to the rank is gone with its cache.
		a.st.pred.ClearRank(ev.Worker)
	}
	a.st.obs.EventApplied(ev.Kind.String())
}

func (a *shardActor) score(m *messages.ScoreRequest) *messages.OverlapReply {
	local := kv.AsLocalHashes(m.LocalHashes) // the message is never modified
	reply := &messages.OverlapReply{QueryId: m.QueryId, Shard: a.st.id}
	if a.st.idx != nil {
		reply.SharedBlocks = a.st.idx.SharedPrefix(local)
	}
	if a.st.idx != nil && (a.st.pred == nil || !a.st.mergePredictions() && !a.st.trust.anyUntrusted) {
		// The common case: the engines' index alone, answered in rank
		// order with no map and no sort.
		a.st.packed = a.st.idx.AppendMatches(a.st.packed[:0], local)
		reply.Ranks = decide.PackSorted(a.st.packed, nil)
		return reply
	}
	var matches index.TieredMatches
	if a.st.idx != nil {
		if a.st.matches == nil {
			a.st.matches = index.TieredMatches{}
		}
		matches = a.st.idx.FindMatchesInto(a.st.matches, local)
	} else {
		matches = a.tree().FindMatches(local)
	}
	var predicted map[kv.WorkerWithDpRank]uint32 // confirmed depth of predicted rows
	if a.st.pred != nil && !a.st.approx {
		preds := a.st.pred.FindMatches(local)
		if a.st.trust.anyUntrusted {
			a.st.trust.fallBack(matches, preds)
		}
		for w, p := range preds {
			if !a.st.mergePredictions() || a.st.trust.untrusted(w) {
				continue // untrusted ranks' rows are predictions already
			}
			if t, ok := matches[w]; !ok || p.Device > t.Device {
				// The prediction extends the device prefix; lower-tier
				// continuation no longer lines up, so it is dropped.
				if predicted == nil {
					predicted = map[kv.WorkerWithDpRank]uint32{}
				}
				predicted[w] = t.Device
				matches[w] = index.TierMatch{Device: p.Device, TreeSize: t.TreeSize}
			}
		}
	}
	reply.Ranks, a.st.packed = decide.PackOverlaps(matches, predicted, a.st.packed)
	return reply
}

// stats answers a ShardStatsQuery. Everything but the digest is kept as
// the index changes; the digest is a walk of the whole index (index.Tree.
// Digest), so it is computed only when asked for.
func (a *shardActor) stats(digest bool) *messages.ShardStatsReply {
	t := a.tree()
	reply := &messages.ShardStatsReply{
		Shard:    a.st.id,
		Restarts: a.st.restarts,
		Counters: t.CounterMap(),
	}
	if digest {
		reply.Digest = t.Digest()
		a.st.digests++
	}
	reply.Counters["shard_resets"] = a.st.resets
	reply.Counters["digests"] = a.st.digests
	reply.Counters[HeldBlocksStat] = uint64(a.st.gate.held.Blocks())
	for w, n := range t.WorkerBlockCounts() {
		reply.Blocks = append(reply.Blocks, &messages.WorkerBlocks{Worker: rankMsg(w), Blocks: n})
	}
	return reply
}

// indexView is what a shard needs from either index flavour.
type indexView interface {
	FindMatches([]kv.LocalBlockHash) map[kv.WorkerWithDpRank]index.TierMatch
	RemoveWorker(kv.WorkerID)
	WorkerBlockCounts() map[kv.WorkerWithDpRank]uint64
	Digest() uint64
	CounterMap() map[string]uint64
	CheckInvariants() error
}

func rankMsg(w kv.WorkerWithDpRank) *messages.WorkerRank { return decide.RankMsg(w) }

func rankOf(m *messages.WorkerRank) kv.WorkerWithDpRank { return decide.RankOf(m) }

// shardOf maps a worker to its shard. Every dp rank of a worker lands on
// the same shard, so RemoveWorker (all ranks) is one shard's work and a
// worker's rank table is checked in one place.
func shardOf(w kv.WorkerID, shards int) int {
	x := uint64(w)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return int(x % uint64(shards))
}

// dump is the shard's engine-event index as events that rebuild it (the
// predictions are this replica's own guesses and stay out).
// dumpChunk answers a DumpQuery with the next chunk of the index's dump
// (index.Indexer.AppendDumpChunk). Approximate mode has nothing to dump:
// its index is predictions, not engine events.
func (a *shardActor) dumpChunk(m *messages.DumpQuery) *messages.DumpChunk {
	if a.st.idx == nil {
		return &messages.DumpChunk{Done: true}
	}
	evs, next, done := a.st.idx.AppendDumpChunk(nil, index.DumpCursor{Tier: int(m.Tier), Rank: m.Rank}, int(max(m.MaxEntries, 1)))
	reply := &messages.DumpChunk{Events: make([]*messages.KvEvent, len(evs)), Done: done,
		NextTier: uint32(next.Tier), NextRank: next.Rank}
	for i := range evs {
		reply.Events[i] = events.ToProto(&evs[i])
	}
	return reply
}
