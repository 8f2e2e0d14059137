package actors

import (
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/sequence"
)

// sequenceActor owns the active requests of one (worker, dp rank): those
// this replica routed and those its peers routed (learned by gossip).
type sequenceActor struct {
	worker  kv.WorkerWithDpRank
	replica string // requests added locally are owned by this replica
	seqs    *sequence.ActiveSequences
	log     *slog.Logger
	// The stale sweep runs at most every expiryEvery (Dynamo: 30 s).
	lastExpiry  time.Time
	expiryEvery time.Duration
}

func newSequenceProps(w kv.WorkerWithDpRank, replica string, cfg sequence.Config, expiryEvery time.Duration, log *slog.Logger) *actor.Props {
	// The tracker lives outside the actor instance so a restart after a
	// panic keeps the rank's requests instead of silently forgetting them.
	seqs := sequence.New(cfg)
	// A synchronized dispatcher runs the actor on its sender's goroutine
	// (nearly always the scheduler's): a decision fans out to every rank,
	// and a goroutine per rank per decision cost more than the work.
	return actor.PropsFromProducer(func() actor.Actor {
		return &sequenceActor{worker: w, replica: replica, seqs: seqs, log: log, expiryEvery: expiryEvery}
	}, actor.WithDispatcher(actor.NewSynchronizedDispatcher(300)))
}

func (a *sequenceActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.AddRequest:
		a.add(m, a.replica)
	case *messages.SequenceEvent:
		a.applyRemote(m)
	case *messages.SequenceEventBatch:
		for _, ev := range m.Events {
			a.applyRemote(ev)
		}
	case *messages.MarkPrefillCompleted:
		_ = a.seqs.MarkPrefillCompleted(m.RequestId)
	case *messages.FreeRequest:
		_ = a.seqs.Free(m.RequestId)
	case *messages.AddOutputBlock:
		_ = a.seqs.AddOutputBlock(m.RequestId, m.DecayFrac)
	case *messages.LoadQuery:
		ctx.Respond(a.load(m))
	case *messages.DropOrigin:
		if freed := a.seqs.FreeOrigin(m.Origin); len(freed) > 0 {
			a.log.Info("dropped requests of a departed replica", "worker", a.worker, "origin", m.Origin, "requests", len(freed))
		}
	case *messages.ActiveRequestsQuery:
		ctx.Respond(a.requests(m))
	case *messages.Tick:
		a.expire(ctx, time.Unix(0, m.UnixNano))
	}
}

func (a *sequenceActor) add(m *messages.AddRequest, origin string) {
	err := a.seqs.AddRequest(sequence.Request{
		ID:                   m.RequestId,
		Origin:               origin,
		SequenceHashes:       toSeq(m.SequenceHashes),
		PromptBlocks:         uint64(m.PromptBlocks),
		ISL:                  m.Isl,
		PrefillTokens:        m.PrefillTokens,
		TrackPrefill:         m.TrackPrefillTokens,
		ExpectedOutputTokens: m.ExpectedOutputTokens,
	}, time.Now())
	if err != nil && !errors.Is(err, sequence.ErrDuplicateRequest) {
		a.log.Debug("add request rejected", "worker", a.worker, "request", m.RequestId, "err", err)
	}
}

// applyRemote applies a peer replica's change; the scheduler has already
// resolved which worker it concerns.
func (a *sequenceActor) applyRemote(ev *messages.SequenceEvent) {
	switch d := ev.Data.(type) {
	case *messages.SequenceEvent_Add:
		a.add(d.Add, ev.Origin)
	case *messages.SequenceEvent_PrefillCompleted:
		_ = a.seqs.MarkPrefillCompleted(d.PrefillCompleted.RequestId)
	case *messages.SequenceEvent_Free:
		_ = a.seqs.Free(d.Free.RequestId)
	}
}

func (a *sequenceActor) expire(ctx actor.Context, now time.Time) {
	if now.Sub(a.lastExpiry) < a.expiryEvery {
		return
	}
	a.lastExpiry = now
	if expired := a.seqs.ExpireStale(now); len(expired) > 0 {
		a.log.Warn("freed stale requests (no free seen)", "worker", a.worker, "requests", len(expired))
		ctx.Send(ctx.Parent(), &messages.StaleRequestsFreed{RequestIds: expired})
	}
}

func (a *sequenceActor) load(m *messages.LoadQuery) *messages.LoadReply {
	l := a.seqs.Load()
	return &messages.LoadReply{
		QueryId:             m.QueryId,
		Worker:              rankMsg(a.worker),
		ActivePrefillTokens: l.ActivePrefillTokens,
		ActiveBlocks:        l.ActiveBlocks,
		NewBlocks:           sequence.CountNewBlocks(a.seqs, m.SequenceHashes, uint64(m.PromptBlocks)),
		ActiveRequests:      uint32(l.ActiveRequests),
	}
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
				TrackPrefillTokens: r.TrackPrefill, Isl: r.ISL,
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

func toSeq(h []uint64) []kv.SequenceHash {
	out := make([]kv.SequenceHash, len(h))
	for i, v := range h {
		out[i] = kv.SequenceHash(v)
	}
	return out
}
