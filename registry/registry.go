// Package registry is one replica's worker registry: which workers are
// known, their data-parallel ranks (the candidates the scheduler routes
// to), their prefill budgets and when they were last heard from.
//
// The registry actor wraps it (and spawns a sequence actor per rank it
// reports added); heartbeats, static registrations and any discovery
// source feed the same Upsert. The package is pure: time is passed in.
package registry

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/kv"
)

// Shape is what decides a worker's ranks and queue threshold.
type Shape struct {
	DpStart uint32
	DpSize  uint32 // 0 counts as 1
	// MaxNumBatchedTokens is the engine's prefill budget per step, the
	// unit of the queue threshold; 0 = the registry's default.
	MaxNumBatchedTokens uint64
	// Role is the pool the worker's ranks are in (prefill, decode or
	// both); a change of role alone keeps the ranks and their requests.
	Role kv.Role
}

func (s Shape) size() uint32 { return max(s.DpSize, 1) }

// Ranks lists the shape's ranks in order.
func (s Shape) Ranks(id kv.WorkerID) []kv.WorkerWithDpRank {
	out := make([]kv.WorkerWithDpRank, 0, s.size())
	for r := s.DpStart; r < s.DpStart+s.size(); r++ {
		out = append(out, kv.WorkerWithDpRank{WorkerID: id, DpRank: r})
	}
	return out
}

func (s Shape) has(dpRank uint32) bool { return dpRank >= s.DpStart && dpRank < s.DpStart+s.size() }

func sameRanks(a, b Shape) bool { return a.DpStart == b.DpStart && a.size() == b.size() }

// Worker is one registered worker; Info is whatever the caller keeps with
// it (the heartbeat).
type Worker[H any] struct {
	ID       kv.WorkerID
	Shape    Shape
	Info     H
	Static   bool // registered by config, API or discovery: never expires
	LastSeen time.Time
	Conditions
}

// Conditions are what keeps a registered worker's ranks from new routes
// (see kv.WorkerState). They survive refreshes and reshapes (busy ranks
// outside a new shape are dropped).
type Conditions struct {
	// Draining: the worker left discovery at DrainingSince; it is removed
	// once the drain grace period has passed (DrainExpired).
	Draining      bool
	DrainingSince time.Time
	// Unhealthy: its health check fails or its pod is not Ready.
	Unhealthy bool
	// BusyRanks are the dp ranks whose engine reports a waiting queue or
	// KV usage over the busy thresholds.
	BusyRanks []uint32
}

// State is one rank's state: the most lasting condition that holds.
func (c Conditions) State(dpRank uint32) kv.WorkerState {
	switch {
	case c.Draining:
		return kv.WorkerDraining
	case c.Unhealthy:
		return kv.WorkerUnhealthy
	case slices.Contains(c.BusyRanks, dpRank):
		return kv.WorkerBusy
	}
	return kv.WorkerActive
}

// Change lists the ranks an Upsert or Remove created and deleted.
type Change struct {
	Added   []kv.WorkerWithDpRank
	Removed []kv.WorkerWithDpRank
}

// Empty reports whether the change left the rank set as it was.
func (c Change) Empty() bool { return len(c.Added) == 0 && len(c.Removed) == 0 }

// ErrFull: a registration would take the registry past one of its limits.
var ErrFull = errors.New("worker registry full")

// Limits bound the registry: every rank costs a sequence actor, a map
// entry in every decision's fan-out and metric series, so an unbounded
// registry is a way to slow every decision down. 0 means no limit.
type Limits struct {
	MaxWorkers int
	MaxRanks   int
}

// Registry holds the workers; its zero value is not usable (call New).
type Registry[H any] struct {
	workers       map[kv.WorkerID]*Worker[H]
	ranks         []kv.WorkerWithDpRank // sorted: the stable candidate order
	defaultBudget uint64
	limits        Limits
}

// New returns an empty registry; defaultBudget is the prefill budget of
// workers that do not announce one (vLLM's default is 8192).
func New[H any](defaultBudget uint64, limits Limits) *Registry[H] {
	return &Registry[H]{workers: map[kv.WorkerID]*Worker[H]{}, defaultBudget: defaultBudget, limits: limits}
}

// Upsert registers a worker or refreshes it. A worker that changed its dp
// ranks gets its old ranks removed and the new ones added; a refresh with
// the same ranks changes no rank. Static is sticky: a heartbeat from a
// statically registered worker does not make it expirable. A new worker or
// a reshape past the limits is refused with ErrFull and changes nothing.
func (r *Registry[H]) Upsert(id kv.WorkerID, shape Shape, info H, static bool, seen time.Time) (Change, error) {
	var ch Change
	old, known := r.workers[id]
	if known && sameRanks(old.Shape, shape) {
		old.Shape, old.Info, old.LastSeen = shape, info, seen
		old.Static = old.Static || static
		return ch, nil
	}
	if err := r.admit(old, known, shape); err != nil {
		return ch, err
	}
	if known {
		ch.Removed = old.Shape.Ranks(id)
	}
	w := &Worker[H]{ID: id, Shape: shape, Info: info, Static: static, LastSeen: seen}
	if known {
		w.Static = w.Static || old.Static
		w.Conditions = old.Conditions
		w.BusyRanks = slices.DeleteFunc(slices.Clone(w.BusyRanks), func(rk uint32) bool { return !shape.has(rk) })
	}
	r.workers[id] = w
	ch.Added = shape.Ranks(id)
	r.updateRanks(ch.Removed, ch.Added)
	return ch, nil
}

// admit checks the limits for a new worker, or a known one changing shape.
func (r *Registry[H]) admit(old *Worker[H], known bool, shape Shape) error {
	workers, ranks := len(r.workers), len(r.ranks)+int(shape.size())
	if known {
		ranks -= int(old.Shape.size())
	} else {
		workers++
	}
	if r.limits.MaxWorkers > 0 && workers > r.limits.MaxWorkers {
		return fmt.Errorf("%d workers registered, limit %d: %w", len(r.workers), r.limits.MaxWorkers, ErrFull)
	}
	if r.limits.MaxRanks > 0 && ranks > r.limits.MaxRanks {
		return fmt.Errorf("%d more dp ranks would make %d, limit %d: %w", shape.size(), ranks, r.limits.MaxRanks, ErrFull)
	}
	return nil
}

// Remove forgets a worker and returns the ranks it had (false: unknown).
func (r *Registry[H]) Remove(id kv.WorkerID) (Change, bool) {
	w, ok := r.workers[id]
	if !ok {
		return Change{}, false
	}
	delete(r.workers, id)
	removed := w.Shape.Ranks(id)
	r.updateRanks(removed, nil)
	return Change{Removed: removed}, true
}

// Expired lists the workers whose heartbeats stopped: not static and last
// seen more than timeout before now (timeout <= 0: never), sorted.
func (r *Registry[H]) Expired(now time.Time, timeout time.Duration) []kv.WorkerID {
	if timeout <= 0 {
		return nil
	}
	var out []kv.WorkerID
	for id, w := range r.workers {
		if !w.Static && now.Sub(w.LastSeen) > timeout {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Ranks is every registered rank, sorted by worker then dp rank. The
// slice is the registry's: do not modify it.
func (r *Registry[H]) Ranks() []kv.WorkerWithDpRank { return r.ranks }

// Has reports whether a rank is registered.
func (r *Registry[H]) Has(w kv.WorkerWithDpRank) bool {
	wk, ok := r.workers[w.WorkerID]
	return ok && wk.Shape.has(w.DpRank)
}

// State is a registered rank's state (Active for an unknown rank).
func (r *Registry[H]) State(w kv.WorkerWithDpRank) kv.WorkerState {
	wk, ok := r.workers[w.WorkerID]
	if !ok {
		return kv.WorkerActive
	}
	return wk.State(w.DpRank)
}

// SetDraining starts (on) or ends a worker's drain. Starting it again
// keeps the first start time: the grace period counts from when the
// worker left, not from the last time a source said so. changed is false
// when nothing changed; known is false for an unknown worker.
func (r *Registry[H]) SetDraining(id kv.WorkerID, on bool, now time.Time) (changed, known bool) {
	w, ok := r.workers[id]
	if !ok {
		return false, false
	}
	if w.Draining == on {
		return false, true
	}
	w.Draining = on
	w.DrainingSince = time.Time{}
	if on {
		w.DrainingSince = now
	}
	return true, true
}

// SetUnhealthy marks a worker unhealthy (on) or healthy again.
func (r *Registry[H]) SetUnhealthy(id kv.WorkerID, on bool) (changed, known bool) {
	w, ok := r.workers[id]
	if !ok {
		return false, false
	}
	if w.Unhealthy == on {
		return false, true
	}
	w.Unhealthy = on
	return true, true
}

// SetBusy replaces a worker's busy ranks: none when on is false, every
// rank when on is true and ranks is empty, else the listed ranks that the
// worker has.
func (r *Registry[H]) SetBusy(id kv.WorkerID, on bool, ranks []uint32) (changed, known bool) {
	w, ok := r.workers[id]
	if !ok {
		return false, false
	}
	var busy []uint32
	switch {
	case !on:
	case len(ranks) == 0:
		for rk := w.Shape.DpStart; rk < w.Shape.DpStart+w.Shape.size(); rk++ {
			busy = append(busy, rk)
		}
	default:
		for _, rk := range ranks {
			if w.Shape.has(rk) && !slices.Contains(busy, rk) {
				busy = append(busy, rk)
			}
		}
		slices.Sort(busy)
	}
	if slices.Equal(busy, w.BusyRanks) {
		return false, true
	}
	w.BusyRanks = busy
	return true, true
}

// DrainExpired lists the workers that have drained for longer than grace
// (grace <= 0: removed at the first check), sorted.
func (r *Registry[H]) DrainExpired(now time.Time, grace time.Duration) []kv.WorkerID {
	var out []kv.WorkerID
	for id, w := range r.workers {
		if w.Draining && now.Sub(w.DrainingSince) >= grace {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Digest summarises which workers are registered, with which ranks, and
// which of them drain: replicas fed by the same discovery sources reach
// the same digest (health and busy verdicts are each replica's own, so
// they are left out). Order-independent; 0 for an empty registry.
func (r *Registry[H]) Digest() uint64 {
	var d uint64
	for id, w := range r.workers {
		var b [17]byte
		binary.LittleEndian.PutUint64(b[0:], uint64(id))
		binary.LittleEndian.PutUint32(b[8:], w.Shape.DpStart)
		binary.LittleEndian.PutUint32(b[12:], w.Shape.size())
		if w.Draining {
			b[16] = 1
		}
		d += xxh3.Hash(b[:]) // wrapping sum: order-independent
	}
	return d
}

// Role is a worker's role (RoleBoth for an unknown worker).
func (r *Registry[H]) Role(id kv.WorkerID) kv.Role {
	if w, ok := r.workers[id]; ok {
		return w.Shape.Role
	}
	return kv.RoleBoth
}

// Budget is a worker's prefill budget per step (its own or the default);
// 0 for an unknown worker.
func (r *Registry[H]) Budget(id kv.WorkerID) uint64 {
	w, ok := r.workers[id]
	if !ok {
		return 0
	}
	if w.Shape.MaxNumBatchedTokens > 0 {
		return w.Shape.MaxNumBatchedTokens
	}
	return r.defaultBudget
}

// Workers lists the registered workers sorted by id.
func (r *Registry[H]) Workers() []Worker[H] {
	out := make([]Worker[H], 0, len(r.workers))
	for _, w := range r.workers {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b Worker[H]) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Info is a registered worker's last announcement (false: unknown). O(1),
// unlike Workers, which copies and sorts them all.
func (r *Registry[H]) Info(id kv.WorkerID) (H, bool) {
	w, ok := r.workers[id]
	if !ok {
		var zero H
		return zero, false
	}
	return w.Info, true
}

// Len is the number of registered workers.
func (r *Registry[H]) Len() int { return len(r.workers) }

// updateRanks keeps the sorted rank list in step with a change by binary
// search: O(ranks) moved per change at worst (a new worker's ranks usually
// go at the end), where re-sorting the whole list on every registration
// made registering 7,000 workers cost seconds.
func (r *Registry[H]) updateRanks(removed, added []kv.WorkerWithDpRank) {
	for _, w := range removed {
		if i, ok := slices.BinarySearchFunc(r.ranks, w, kv.CompareRanks); ok {
			r.ranks = slices.Delete(r.ranks, i, i+1)
		}
	}
	for _, w := range added {
		if i, ok := slices.BinarySearchFunc(r.ranks, w, kv.CompareRanks); !ok {
			r.ranks = slices.Insert(r.ranks, i, w)
		}
	}
}
