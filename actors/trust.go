package actors

import (
	"context"
	"log/slog"
	"maps"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/trust"
)

// The trust actor owns the replica's trust.Tracker: every source of
// evidence sends it a message (these are local, never gossiped: each
// replica consumes the same events and derives the same verdicts), and
// it publishes the ranks that are not exact to the shards (which score
// untrusted ranks from predicted blocks) and the scheduler (which
// records predictions for them), and a snapshot for status readers.

// trustRouted: rank was sent work at (unix nanos) that makes its engine
// store blocks, so KV events are due: the scheduler routed it a request
// with blocks not counted as cached there, or its published load shows a
// request started (any replica's) with at least a block to prefill. The
// scheduler sends at most a few per rank per second.
type trustRouted struct {
	rank kv.WorkerWithDpRank
	at   int64
}

// trustEventsSeen: a shard's ranks that had KV events since its last
// tick, and that tick's time (unix nanos).
type trustEventsSeen struct {
	seen map[kv.WorkerWithDpRank]struct{}
	at   int64
}

// trustRefused: a shard's index refused an event of rank.
type trustRefused struct {
	rank   kv.WorkerWithDpRank
	reason string
	at     int64
}

// trustCleared: a Cleared event of rank was applied.
type trustCleared struct {
	rank kv.WorkerWithDpRank
	at   int64
}

// trustStream: what an event source saw on rank's stream.
type trustStream struct {
	rank   kv.WorkerWithDpRank
	kind   string // "gap", "replay_ok", "replay_failed"
	detail string
	missed uint64
	at     int64
}

// trustParity: one proxied request's predicted and confirmed cached tokens.
type trustParity struct {
	rank                 kv.WorkerWithDpRank
	predicted, confirmed int
	at                   int64
}

// trustTable is what the actor publishes after a change: the ranks that
// are not exact (every other rank is). Read-only once sent.
type trustTable struct {
	notExact map[kv.WorkerWithDpRank]trust.State
}

func (t *trustTable) state(w kv.WorkerWithDpRank) trust.State {
	if t == nil {
		return trust.Exact
	}
	return t.notExact[w]
}

// RankTrust is one rank's trust as status readers see it.
type RankTrust struct {
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Detail qualifies the last evidence (a refused event's reason, a
	// failed replay's, how many events a gap lost).
	Detail string `json:"detail,omitempty"`
	// SinceUnixNano is when the rank entered State (0 for exact ranks
	// never otherwise).
	SinceUnixNano int64 `json:"since_unix_nano,omitempty"`
}

// trustSnapshot is what Router.IndexTrust and Status read without asking
// the actor: the ranks that are not exact, and transition counts by
// target state and reason.
type trustSnapshot struct {
	ranks       map[kv.WorkerWithDpRank]RankTrust
	transitions map[[2]string]uint64
}

type trustActor struct {
	tracker   *trust.Tracker
	shards    []*actor.PID
	scheduler *actor.PID
	published map[kv.WorkerWithDpRank]trust.State
	since     map[kv.WorkerWithDpRank]int64
	counts    map[[2]string]uint64
	snap      *atomic.Pointer[trustSnapshot]
	log       *slog.Logger
	limiter   loglimit.Limiter
}

func newTrustProps(cfg trust.Config, shards []*actor.PID, scheduler *actor.PID, snap *atomic.Pointer[trustSnapshot], log *slog.Logger) *actor.Props {
	// The tracker lives outside the instance so a restart keeps it.
	tr := trust.New(cfg)
	published := map[kv.WorkerWithDpRank]trust.State{}
	since := map[kv.WorkerWithDpRank]int64{}
	counts := map[[2]string]uint64{}
	return actor.PropsFromProducer(func() actor.Actor {
		return &trustActor{tracker: tr, shards: shards, scheduler: scheduler, published: published, since: since,
			counts: counts, snap: snap, log: log.With("component", "index_trust"), limiter: loglimit.Limiter{Every: time.Second}}
	})
}

func (a *trustActor) Receive(ctx actor.Context) {
	var changes []trust.Transition
	switch m := ctx.Message().(type) {
	case *messages.RankTable:
		list := make([]kv.WorkerWithDpRank, 0, len(m.Ranks))
		for _, e := range m.Ranks {
			list = append(list, rankOf(e.Worker))
		}
		a.tracker.SetRanks(list)
		// The scheduler forwards every rank table, including the one a
		// restarted scheduler asks for: it gets the verdicts again.
		a.published = nil
	case trustRouted:
		a.tracker.Routed(m.rank, time.Unix(0, m.at))
	case trustEventsSeen:
		at := time.Unix(0, m.at)
		for w := range m.seen {
			changes = append(changes, a.tracker.EventSeen(w, at)...)
		}
	case trustRefused:
		changes = a.tracker.Refused(m.rank, m.reason, time.Unix(0, m.at))
	case trustCleared:
		changes = a.tracker.Cleared(m.rank, time.Unix(0, m.at))
	case trustStream:
		now := time.Unix(0, m.at)
		switch m.kind {
		case "gap":
			changes = a.tracker.GapOpened(m.rank, m.missed, now)
		case "replay_ok":
			changes = a.tracker.ReplayCompleted(m.rank, now)
		case "replay_failed":
			changes = a.tracker.ReplayFailed(m.rank, m.detail, now)
		}
	case trustParity:
		changes = a.tracker.ObserveParity(m.rank, m.predicted, m.confirmed, time.Unix(0, m.at))
	case *messages.Tick:
		changes = a.tracker.Tick(time.Unix(0, m.UnixNano))
	default:
		return
	}
	a.publish(ctx, changes)
}

// publish logs and counts the transitions and, when the set of ranks
// that are not exact changed, sends it to the shards and the scheduler.
// The snapshot is rebuilt on every change (SetRanks may forget ranks).
func (a *trustActor) publish(ctx actor.Context, changes []trust.Transition) {
	now := time.Now()
	for _, c := range changes {
		a.counts[[2]string{c.To.String(), c.Reason}]++
		a.since[c.Rank] = now.UnixNano()
		a.logTransition(c, now)
	}
	cur := a.tracker.NotExact()
	if a.published == nil || !maps.Equal(cur, a.published) {
		a.published = cur
		t := &trustTable{notExact: cur}
		for _, sh := range a.shards {
			ctx.Send(sh, t)
		}
		ctx.Send(a.scheduler, t)
	}
	for w := range a.since {
		if _, ok := cur[w]; !ok {
			delete(a.since, w)
		}
	}
	// The snapshot is replaced when anything readers see changed: a
	// state, or the cause or detail of one (a latched rank's reason moves
	// to the cause that now holds it).
	old := a.snap.Load()
	if len(cur) == 0 && len(changes) == 0 && old != nil && len(old.ranks) == 0 {
		return
	}
	ranks := make(map[kv.WorkerWithDpRank]RankTrust, len(cur))
	for w, s := range cur {
		_, why := a.tracker.State(w)
		ranks[w] = RankTrust{State: s.String(), Reason: why, Detail: a.tracker.Detail(w), SinceUnixNano: a.since[w]}
	}
	if old != nil && len(changes) == 0 && maps.Equal(ranks, old.ranks) {
		return
	}
	a.snap.Store(&trustSnapshot{ranks: ranks, transitions: maps.Clone(a.counts)})
}

// logTransition writes a line per transition: WARN when a rank loses
// trust, INFO when it regains it. A fleet-wide storm (every rank of many
// workers at once) is rate limited like any other input-driven line.
func (a *trustActor) logTransition(c trust.Transition, now time.Time) {
	ok, suppressed := a.limiter.Allow(now)
	if !ok {
		return
	}
	level := slog.LevelWarn
	if c.To < c.From {
		level = slog.LevelInfo
	}
	a.log.Log(context.Background(), level, "index trust changed", "worker", uint64(c.Rank.WorkerID), "dp_rank", c.Rank.DpRank,
		"from", c.From.String(), "to", c.To.String(), "reason", c.Reason, "detail", a.tracker.Detail(c.Rank), "suppressed", suppressed)
}
