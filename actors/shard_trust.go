package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/trust"
)

// shardTrust is a shard's part in index trust: it reports what its index
// sees of each rank's stream to the trust actor, and keeps the ranks that
// are not exact so it can score untrusted ones from predicted blocks.
type shardTrust struct {
	pid *actor.PID // the trust actor; nil: trust is off
	// ttl is the predictions' lifetime when only the fallback needs
	// them (router-predicted-ttl-secs unset).
	ttl   time.Duration
	table *trustTable
	// anyUntrusted: some rank in table is untrusted (only then does a
	// lookup leave its fast path).
	anyUntrusted bool
	// seen holds the ranks with events since the last tick: sent once a
	// tick, stamped with the tick's time, so the trust actor is not sent a
	// message per event and applying an event reads no clock (staleness
	// is judged in seconds; a tick is one).
	seen map[kv.WorkerWithDpRank]struct{}
}

func (t *shardTrust) on() bool { return t != nil && t.pid != nil }

// noteEvent records an event of w arriving (applied or not).
func (t *shardTrust) noteEvent(w kv.WorkerWithDpRank) {
	if !t.on() {
		return
	}
	if t.seen == nil {
		t.seen = map[kv.WorkerWithDpRank]struct{}{}
	}
	t.seen[w] = struct{}{}
}

// noteApplied reports an event's outcome that bears on trust: a refusal,
// or a clear (the rank's index is exact again).
func (t *shardTrust) noteApplied(ctx actor.SenderContext, ev *kv.Event, err error) {
	if !t.on() || ctx == nil {
		return
	}
	switch {
	case err != nil:
		if reason := index.ErrorReason(err); trust.Counts(reason) {
			ctx.Send(t.pid, trustRefused{rank: ev.Worker, reason: reason, at: time.Now().UnixNano()})
		}
	case ev.Kind == kv.EventCleared:
		ctx.Send(t.pid, trustCleared{rank: ev.Worker, at: time.Now().UnixNano()})
	}
}

// flush sends the ranks seen since the last tick, at the tick's time.
func (t *shardTrust) flush(ctx actor.SenderContext, tickNanos int64) {
	if !t.on() || len(t.seen) == 0 {
		return
	}
	ctx.Send(t.pid, trustEventsSeen{seen: t.seen, at: tickNanos})
	t.seen = nil // the message owns the map now
}

// untrusted reports whether w is scored from predicted blocks.
func (t *shardTrust) untrusted(w kv.WorkerWithDpRank) bool {
	return t.on() && t.table.state(w) == trust.Untrusted
}

// setTable takes the trust actor's latest table.
func (t *shardTrust) setTable(m *trustTable) {
	t.table, t.anyUntrusted = m, false
	for _, s := range m.notExact {
		if s == trust.Untrusted {
			t.anyUntrusted = true
		}
	}
}

// fallBack replaces the index's matches of untrusted ranks with their
// predicted ones (approximate mode's rule: a routed prompt's blocks are
// cached on its rank for the TTL; device tier only, nothing confirmed).
// preds is the predicted index's matches of the same prompt.
func (t *shardTrust) fallBack(matches, preds index.TieredMatches) {
	for w := range matches {
		if t.untrusted(w) {
			delete(matches, w)
		}
	}
	for w, p := range preds {
		if t.untrusted(w) {
			matches[w] = index.TierMatch{Device: p.Device, TreeSize: p.TreeSize}
		}
	}
}
