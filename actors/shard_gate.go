package actors

import (
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/holdback"
	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// eventGate is a shard's view of which workers are registered, and with
// which dp ranks, from the registry's RankTable, and the holdback buffer
// of the others' events.
type eventGate struct {
	workers map[kv.WorkerID]bool
	ranks   map[kv.WorkerWithDpRank]bool
	stores  index.SharedStores
	held    *holdback.Buffer
	obs     Observer
}

// verdict is what the gate says of an event.
type verdict uint8

const (
	// admitted: the worker is registered with that rank (or is a
	// declared shared store); apply the event.
	admitted verdict = iota
	// held: the worker is not registered (yet); the event waits.
	held
	// holdFull: the worker is not registered and the holdback buffer is
	// full: the event is dropped ("unregistered_worker").
	holdFull
	// unknownRank: the worker is registered, but its ranks do not include
	// the event's: an event of a rank that exists nowhere, refused.
	unknownRank
)

// reasonUnknownRank labels events refused for a rank outside the
// registered worker's ranks.
const reasonUnknownRank = "unknown_rank"

func newEventGate(cfg IndexConfig, obs Observer) (*eventGate, error) {
	held, err := holdback.New(holdback.Config{MaxBlocks: cfg.HoldBlocks, MaxAge: cfg.HoldAge})
	if err != nil {
		return nil, fmt.Errorf("unregistered-worker event hold: %w", err)
	}
	return &eventGate{workers: map[kv.WorkerID]bool{}, ranks: map[kv.WorkerWithDpRank]bool{},
		stores: cfg.SharedStores, held: held, obs: obs}, nil
}

// admit says what to do with ev. A registered worker's event is applied
// if its dp rank is one of the worker's; a declared shared store (which
// never registers: the operator vouched for it) is applied whatever rank
// it names. Any other event is held or, past the bound, refused
// (holdFull; the caller counts and logs it). Shared-tier events of other
// publishers wait like their device events, so an unregistered publisher
// cannot grow the shared tier either.
func (g *eventGate) admit(ev kv.Event) verdict {
	if g.stores.Holds(ev.Worker.WorkerID) {
		return admitted
	}
	if g.workers[ev.Worker.WorkerID] {
		return g.rankOf(ev)
	}
	// The shard decodes into one scratch event: what is held is a copy.
	if err := g.held.Hold(ev.Clone(), time.Now()); err != nil {
		return holdFull
	}
	return held
}

// rankOf checks a registered worker's event against its ranks.
func (g *eventGate) rankOf(ev kv.Event) verdict {
	if g.ranks[ev.Worker] || g.stores.Holds(ev.Worker.WorkerID) {
		return admitted
	}
	return unknownRank
}

// registered takes the registry's new rank set and returns the held
// events of workers that just registered, oldest first.
func (g *eventGate) registered(t *messages.RankTable) []kv.Event {
	now := make(map[kv.WorkerID]bool, len(t.Ranks))
	ranks := make(map[kv.WorkerWithDpRank]bool, len(t.Ranks))
	var out []kv.Event
	for _, e := range t.Ranks {
		id := kv.WorkerID(e.Worker.GetWorkerId())
		ranks[kv.WorkerWithDpRank{WorkerID: id, DpRank: e.Worker.GetDpRank()}] = true
		if !now[id] && !g.workers[id] {
			out = append(out, g.held.Release(id)...)
		}
		now[id] = true
	}
	g.workers, g.ranks = now, ranks
	return out
}

// forget drops a removed worker's held events.
func (g *eventGate) forget(w kv.WorkerID) { g.held.Forget(w) }

// expire drops events held past the hold age, counted, and returns how
// many of each rank.
func (g *eventGate) expire(now time.Time) map[kv.WorkerWithDpRank]int {
	dropped := g.held.ExpireRanks(now)
	for _, n := range dropped {
		for range n {
			g.obs.EventDropped("unregistered_worker_expired")
		}
	}
	return dropped
}
