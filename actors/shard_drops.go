package actors

import (
	"log/slog"
	"time"

	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/kv"
)

// dropLog writes the WARN line of events a shard drops or refuses, at
// most one a second per reason, so one flood (a misconfigured engine's
// every event) neither fills the log nor hides a different reason's
// first line. Every drop is counted by the caller whether or not it is
// logged; a line says how many of its reason went unlogged before it.
type dropLog struct {
	limits map[string]*loglimit.Limiter
}

func (d *dropLog) limiter(reason string) *loglimit.Limiter {
	if d.limits == nil {
		d.limits = map[string]*loglimit.Limiter{}
	}
	l := d.limits[reason]
	if l == nil {
		l = &loglimit.Limiter{Every: time.Second}
		d.limits[reason] = l
	}
	return l
}

// warn logs a dropped event naming its worker, rank and the reason.
func (d *dropLog) warn(log *slog.Logger, shard uint32, ev *kv.Event, reason string, err error) {
	ok, suppressed := d.limiter(reason).Allow(time.Now())
	if !ok || log == nil {
		return
	}
	attrs := []any{"reason", reason, "worker", uint64(ev.Worker.WorkerID), "dp_rank", ev.Worker.DpRank,
		"event_id", ev.EventID, "kind", ev.Kind.String(), "tier", ev.Tier.String(), "shard", shard,
		"suppressed", suppressed}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	log.Warn("KV event dropped", attrs...)
}

// warnRanks logs drops of one reason counted per rank rather than met one
// by one (held events expiring in bulk): one line per rank, within the
// reason's one line a second.
func (d *dropLog) warnRanks(log *slog.Logger, shard uint32, reason string, ranks map[kv.WorkerWithDpRank]int) {
	for r, n := range ranks {
		ok, suppressed := d.limiter(reason).Allow(time.Now())
		if !ok || log == nil {
			return
		}
		log.Warn("KV events dropped", "reason", reason, "worker", uint64(r.WorkerID), "dp_rank", r.DpRank,
			"events", n, "shard", shard, "suppressed", suppressed)
	}
}
