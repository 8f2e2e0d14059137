package actors

import (
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/holdback"
	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// eventGate is a shard's view of which workers are registered, from the
// registry's RankTable, and the holdback buffer of the others' events.
type eventGate struct {
	workers map[kv.WorkerID]bool
	stores  index.SharedStores
	held    *holdback.Buffer
	obs     Observer
}

func newEventGate(cfg IndexConfig, obs Observer) (*eventGate, error) {
	held, err := holdback.New(holdback.Config{MaxBlocks: cfg.HoldBlocks, MaxAge: cfg.HoldAge})
	if err != nil {
		return nil, fmt.Errorf("unregistered-worker event hold: %w", err)
	}
	return &eventGate{workers: map[kv.WorkerID]bool{}, stores: cfg.SharedStores, held: held, obs: obs}, nil
}

// admit says whether ev's worker is registered or a declared shared
// store (which never registers: the operator vouched for it); if not, the
// event is held or, past the bound, dropped and counted. Shared-tier
// events of other publishers wait like their device events, so an
// unregistered publisher cannot grow the shared tier either.
func (g *eventGate) admit(ev kv.Event) bool {
	if g.workers[ev.Worker.WorkerID] || g.stores.Holds(ev.Worker.WorkerID) {
		return true
	}
	// The shard decodes into one scratch event: what is held is a copy.
	if err := g.held.Hold(ev.Clone(), time.Now()); err != nil {
		g.obs.EventDropped("unregistered_worker")
	}
	return false
}

// registered takes the registry's new rank set and returns the held
// events of workers that just registered, oldest first.
func (g *eventGate) registered(t *messages.RankTable) []kv.Event {
	now := make(map[kv.WorkerID]bool, len(t.Ranks))
	var out []kv.Event
	for _, e := range t.Ranks {
		id := kv.WorkerID(e.Worker.GetWorkerId())
		if !now[id] && !g.workers[id] {
			out = append(out, g.held.Release(id)...)
		}
		now[id] = true
	}
	g.workers = now
	return out
}

// forget drops a removed worker's held events.
func (g *eventGate) forget(w kv.WorkerID) { g.held.Forget(w) }

// expire drops events held past the hold age, counted.
func (g *eventGate) expire(now time.Time) {
	for range g.held.Expire(now) {
		g.obs.EventDropped("unregistered_worker_expired")
	}
}
