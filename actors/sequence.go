package actors

import (
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sequence"
)

// sequenceActor owns the active requests of one (worker, dp rank): those
// this replica routed and those its peers routed (learned by gossip).
type sequenceActor struct {
	worker  kv.WorkerWithDpRank
	replica string // requests added locally are owned by this replica
	seqs    *sequence.ActiveSequences
	// rate measures the rank's prefill throughput from the completions
	// this replica sees (its own and, by gossip, its peers'), for the
	// ttft cost; the rule is scheduling.PrefillRate.
	rate *scheduling.PrefillRate
	log  *slog.Logger
	// Stale expiries go to both request tables: the scheduler's (its own
	// requests, which it also gossips) and the replication edge's.
	scheduler, replication *actor.PID
	// The stale sweep runs at most every expiryEvery (Dynamo: 30 s).
	lastExpiry  time.Time
	expiryEvery time.Duration
	// pub is what was last published to the scheduler (RankLoad); it
	// lives outside the instance like the tracker.
	pub *loadPublisher
	obs Observer
}

// loadPublisher is the rank's side of the published load: the scheduler
// adds it counts and the load it last sent.
type loadPublisher struct {
	addsApplied uint64
	last        *messages.RankLoad
}

func newSequenceProps(w kv.WorkerWithDpRank, cfg Config, scheduler, replication *actor.PID) *actor.Props {
	// The tracker lives outside the actor instance so a restart after a
	// panic keeps the rank's requests instead of silently forgetting them.
	seqs := sequence.New(cfg.Sequence)
	rate := &scheduling.PrefillRate{}
	pub := &loadPublisher{}
	log := cfg.Logger.With("component", "sequence", "worker", w)
	// A synchronized dispatcher runs the actor on its sender's goroutine
	// (the scheduler's or the replication edge's): a decision fans out to
	// every rank, and a goroutine per rank per decision cost more than the
	// work.
	return actor.PropsFromProducer(func() actor.Actor {
		return &sequenceActor{worker: w, replica: cfg.ReplicaID, seqs: seqs, rate: rate, log: log,
			scheduler: scheduler, replication: replication, expiryEvery: cfg.Sequence.SweepInterval(cfg.StaleCheckInterval), pub: pub,
			obs: cfg.Observer}
	}, actor.WithDispatcher(actor.NewSynchronizedDispatcher(300)))
}

func (a *sequenceActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.LoadQuery:
		ctx.Respond(a.load(m))
		return
	case *messages.ActiveRequestsQuery:
		ctx.Respond(a.requests(m))
		return
	case *messages.RankLoadQuery:
		// The scheduler starts counting its adds to this actor afresh
		// (a new rank, or a restarted scheduler): so does the actor.
		a.pub.last, a.pub.addsApplied = nil, 0
		a.publish(ctx, true)
		return
	case *messages.AddRequest:
		// Only this replica's scheduler sends adds directly (a peer's
		// arrive as SequenceEvents): counting them tells it which of its
		// decisions a published load includes.
		a.pub.addsApplied++
		a.add(m, a.replica)
	case *messages.SequenceEvent:
		a.applyRemote(m)
	case *messages.SequenceEventBatch:
		for _, ev := range m.Events {
			a.applyRemote(ev)
		}
	case *messages.MarkPrefillCompleted:
		a.prefillCompleted(m.RequestId)
	case *messages.FreeRequest:
		a.check("free", m.RequestId, a.seqs.Free(m.RequestId))
	case *messages.AddOutputBlock:
		a.check("output_block", m.RequestId, a.seqs.AddOutputBlock(m.RequestId, m.DecayFrac))
	case *messages.RenewLease:
		cfg := a.seqs.Config()
		_, err := a.seqs.Renew(m.RequestId, time.Now(), cfg.Lease.Renewal(cfg.ExpiryDuration))
		a.check("renew_lease", m.RequestId, err)
		return // the load did not change
	case *messages.DropOrigin:
		if freed := a.seqs.FreeOrigin(m.Origin); len(freed) > 0 {
			a.log.Info("dropped requests of a departed replica", "origin", m.Origin, "requests", len(freed))
		}
	case *messages.RestoreOrigin:
		a.restore(m)
	case *releaseFrom:
		a.release(m)
	case *messages.Tick:
		a.expire(ctx, time.Unix(0, m.UnixNano))
	default:
		return // lifecycle messages of the actor itself change nothing
	}
	a.publish(ctx, false)
}

// publish sends the scheduler the rank's load when it changed since the
// last one sent (or, full, unconditionally with every root).
func (a *sequenceActor) publish(ctx actor.Context, full bool) {
	if a.scheduler == nil {
		return
	}
	l := a.seqs.Load()
	m := &messages.RankLoad{
		Worker: rankMsg(a.worker), ActivePrefillTokens: l.ActivePrefillTokens, ActiveBlocks: l.ActiveBlocks,
		ActiveRequests: uint32(l.ActiveRequests), PrefillTokensPerSec: a.rate.TokensPerSec(),
		AddsApplied: a.pub.addsApplied, Full: full,
	}
	if tokens, added, ok := a.seqs.HeadPrefill(); ok {
		m.HeadPrefillTokens = tokens
		m.HeadStartedUnixNano = a.rate.HeadStart(added).UnixNano()
	}
	added, removed := a.seqs.TakeRootChanges()
	if full {
		added, removed = a.seqs.Roots(), nil
	}
	if !full && len(added) == 0 && len(removed) == 0 && sameLoad(a.pub.last, m) {
		return
	}
	m.RootsAdded, m.RootsRemoved = toU64(added), toU64(removed)
	a.pub.last = m
	ctx.Send(a.scheduler, m)
}

// sameLoad compares the load fields of two published loads (not roots).
func sameLoad(a, b *messages.RankLoad) bool {
	return a != nil && a.ActivePrefillTokens == b.ActivePrefillTokens && a.ActiveBlocks == b.ActiveBlocks &&
		a.ActiveRequests == b.ActiveRequests && a.PrefillTokensPerSec == b.PrefillTokensPerSec &&
		a.HeadPrefillTokens == b.HeadPrefillTokens && a.HeadStartedUnixNano == b.HeadStartedUnixNano &&
		a.AddsApplied == b.AddsApplied
}

func toU64(h []kv.SequenceHash) []uint64 {
	if len(h) == 0 {
		return nil
	}
	out := make([]uint64, len(h))
	for i, v := range h {
		out[i] = uint64(v)
	}
	return out
}

// check logs a lifecycle step the tracker refused. An unknown request is
// expected (its free raced a stale expiry or a departed peer's drop), so
// it is a debug line; anything else means a caller broke a rule.
func (a *sequenceActor) check(op, id string, err error) {
	switch {
	case err == nil:
	case errors.Is(err, sequence.ErrUnknownRequest):
		a.log.Debug("lifecycle step for a request not active here", "op", op, "request", id)
	default:
		a.log.Warn("lifecycle step rejected", "op", op, "request", id, "err", err)
	}
}

// prefillCompleted ends a request's prefill and feeds the time it took
// (on this replica's clock: a peer's add and completion arrive with the
// same gossip delay) to the rank's throughput estimate.
func (a *sequenceActor) prefillCompleted(id string) {
	tokens, started, ok := a.seqs.PrefillPending(id)
	a.check("prefill_completed", id, a.seqs.MarkPrefillCompleted(id))
	now := time.Now()
	if ok && tokens > 0 {
		a.rate.Observe(tokens, started, now)
	}
	if ok {
		// The prompt is done: the lease (of a request this replica
		// routed; others have none) now runs for the output alone.
		cfg := a.seqs.Config()
		out := a.seqs.ExpectedOutput(id)
		_, err := a.seqs.Renew(id, now, cfg.Lease.AfterPrefill(out, cfg.ExpiryDuration))
		a.check("renew_lease", id, err)
	}
}

func (a *sequenceActor) add(m *messages.AddRequest, origin string) {
	a.takeOver(m, origin) // takeover.go
}

func requestOf(m *messages.AddRequest, origin string) sequence.Request {
	return sequence.Request{
		ID:                   m.RequestId,
		Origin:               origin,
		SequenceHashes:       kv.AsSequenceHashes(m.SequenceHashes), // the message is never mutated once sent
		PromptBlocks:         uint64(m.PromptBlocks),
		ISL:                  m.Isl,
		PrefillTokens:        m.PrefillTokens,
		TrackPrefill:         m.TrackPrefillTokens,
		ExpectedOutputTokens: m.ExpectedOutputTokens,
	}
}

// applyRemote applies a peer replica's change; the replication edge has
// already resolved which rank it concerns.
func (a *sequenceActor) applyRemote(ev *messages.SequenceEvent) {
	switch d := ev.Data.(type) {
	case *messages.SequenceEvent_Add:
		a.add(d.Add, ev.Origin)
	case *messages.SequenceEvent_PrefillCompleted:
		a.prefillCompleted(d.PrefillCompleted.RequestId)
	case *messages.SequenceEvent_Free:
		a.check("free", d.Free.RequestId, a.seqs.Free(d.Free.RequestId))
	}
}

// restore replaces an origin's requests with its full state, keeping each
// request's start time (so the stale expiry still applies to it) and its
// prefill progress.
func (a *sequenceActor) restore(m *messages.RestoreOrigin) {
	a.seqs.FreeOrigin(m.Origin)
	now := time.Now()
	for _, add := range m.Adds {
		r := requestOf(add, m.Origin)
		started := now
		if add.StartedUnixNano != 0 {
			started = time.Unix(0, add.StartedUnixNano)
		}
		done := slices.Contains(m.PrefillDone, add.RequestId)
		if done {
			r.PrefillTokens = 0
		}
		err := a.seqs.Restore(sequence.RequestInfo{
			ID: r.ID, Origin: r.Origin, SequenceHashes: r.SequenceHashes, PromptBlocks: r.PromptBlocks,
			ISL: r.ISL, PrefillTokens: r.PrefillTokens, TrackPrefill: r.TrackPrefill, PrefillDone: done,
			ExpectedOutputTokens: r.ExpectedOutputTokens, StartedAt: started,
		})
		if err != nil {
			a.log.Warn("restore of a peer's request rejected", "origin", m.Origin, "request", add.RequestId, "err", err)
		}
	}
}

func (a *sequenceActor) expire(ctx actor.Context, now time.Time) {
	if now.Sub(a.lastExpiry) < a.expiryEvery {
		return
	}
	a.lastExpiry = now
	leased, stale := a.seqs.Expired(now)
	if expired := a.seqs.ExpireStale(now); len(expired) > 0 {
		a.log.Warn("freed expired requests (no free seen)", "lease_ended", leased, "stale", stale)
		if a.obs != nil {
			a.obs.RequestsExpired("lease", leased)
			a.obs.RequestsExpired("stale", stale)
		}
		msg := &messages.StaleRequestsFreed{RequestIds: expired}
		ctx.Send(a.scheduler, msg)
		ctx.Send(a.replication, msg)
	}
}

func (a *sequenceActor) load(m *messages.LoadQuery) *messages.LoadReply {
	l := a.seqs.Load()
	reply := &messages.LoadReply{
		QueryId:             m.QueryId,
		Worker:              rankMsg(a.worker),
		ActivePrefillTokens: l.ActivePrefillTokens,
		ActiveBlocks:        l.ActiveBlocks,
		NewBlocks:           sequence.CountNewBlocks(a.seqs, m.SequenceHashes, uint64(m.PromptBlocks)),
		ActiveRequests:      uint32(l.ActiveRequests),
		PrefillTokensPerSec: a.rate.TokensPerSec(),
		AddsApplied:         a.pub.addsApplied,
	}
	if tokens, started, ok := a.seqs.HeadPrefill(); ok {
		reply.HeadPrefillTokens = tokens
		reply.HeadPrefillElapsedNanos = int64(a.rate.HeadElapsed(started, time.Now()))
	}
	return reply
}

func (a *sequenceActor) requests(q *messages.ActiveRequestsQuery) *messages.ActiveRequestsReply {
	reply := &messages.ActiveRequestsReply{QueryId: q.QueryId}
	for _, r := range a.seqs.Requests() {
		if q.Origin != nil && r.Origin != *q.Origin {
			continue
		}
		hashes := make([]uint64, len(r.SequenceHashes))
		for i, h := range r.SequenceHashes {
			hashes[i] = uint64(h)
		}
		reply.Events = append(reply.Events, &messages.SequenceEvent{
			Origin: r.Origin,
			Data: &messages.SequenceEvent_Add{Add: &messages.AddRequest{
				RequestId: r.ID, Worker: rankMsg(a.worker), SequenceHashes: hashes,
				PromptBlocks: uint32(r.PromptBlocks), Stride: uint32(a.seqs.Config().EffectiveStride()),
				PrefillTokens: r.PrefillTokens, ExpectedOutputTokens: r.ExpectedOutputTokens,
				TrackPrefillTokens: r.TrackPrefill, Isl: r.ISL, StartedUnixNano: r.StartedAt.UnixNano(),
			}},
		})
		if r.PrefillDone {
			reply.Events = append(reply.Events, &messages.SequenceEvent{
				Origin: r.Origin,
				Data:   &messages.SequenceEvent_PrefillCompleted{PrefillCompleted: &messages.MarkPrefillCompleted{RequestId: r.ID}},
			})
		}
	}
	return reply
}
