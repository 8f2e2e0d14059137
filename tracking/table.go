// Package tracking is the request → worker-rank map of one router replica:
// which rank serves each routed request and which replica (origin) owns
// it, with the rules for applying a peer's gossiped change to it.
//
// The scheduler keeps one Table for the requests it routed itself and the
// replication edge keeps one for its peers' requests; both apply the same
// rules from here. The package is pure: no goroutines, clock or locks.
package tracking

import (
	"slices"

	"github.com/kvrouter/kvrouter/kv"
)

// Entry is where one tracked request runs and who owns it.
type Entry struct {
	Rank   kv.WorkerWithDpRank
	Origin string
	// Token identifies the route call that created a local entry, so a
	// late cancel of that call frees this request and not a newer one that
	// re-used its id.
	Token uint64
}

// Table maps request ids to their rank and keeps a per-rank count, so the
// scheduler can tell an idle rank (whose load is known without asking)
// from a busy one in O(1).
type Table struct {
	entries map[string]Entry
	active  map[kv.WorkerWithDpRank]int
	// transitions records ranks whose count crossed zero since the last
	// TakeTransitions: true = became busy, false = became idle. A rank that
	// crosses back within one window is removed (no net change).
	transitions map[kv.WorkerWithDpRank]bool
}

// New returns an empty table.
func New() *Table {
	return &Table{
		entries:     map[string]Entry{},
		active:      map[kv.WorkerWithDpRank]int{},
		transitions: map[kv.WorkerWithDpRank]bool{},
	}
}

// Len is the number of tracked requests.
func (t *Table) Len() int { return len(t.entries) }

// Lookup returns a tracked request's entry.
func (t *Table) Lookup(id string) (Entry, bool) {
	e, ok := t.entries[id]
	return e, ok
}

// Active is the number of tracked requests on a rank.
func (t *Table) Active(w kv.WorkerWithDpRank) int { return t.active[w] }

// Track records a request, replacing any earlier entry of the same id (a
// re-used id moves to its new rank).
func (t *Table) Track(id string, e Entry) {
	t.Untrack(id)
	t.entries[id] = e
	if t.active[e.Rank]++; t.active[e.Rank] == 1 {
		t.crossed(e.Rank, true)
	}
}

// Untrack forgets a request and returns its entry (false: not tracked).
func (t *Table) Untrack(id string) (Entry, bool) {
	e, ok := t.entries[id]
	if !ok {
		return Entry{}, false
	}
	delete(t.entries, id)
	if t.active[e.Rank]--; t.active[e.Rank] <= 0 {
		delete(t.active, e.Rank)
		t.crossed(e.Rank, false)
	}
	return e, true
}

func (t *Table) crossed(w kv.WorkerWithDpRank, busy bool) {
	if prev, ok := t.transitions[w]; ok && prev != busy {
		delete(t.transitions, w)
		return
	}
	t.transitions[w] = busy
}

// TakeTransitions returns the ranks that became busy and idle since the
// last call, each sorted, and starts a new window.
func (t *Table) TakeTransitions() (busy, idle []kv.WorkerWithDpRank) {
	if len(t.transitions) == 0 {
		return nil, nil
	}
	for w, b := range t.transitions {
		if b {
			busy = append(busy, w)
		} else {
			idle = append(idle, w)
		}
	}
	clear(t.transitions)
	slices.SortFunc(busy, kv.CompareRanks)
	slices.SortFunc(idle, kv.CompareRanks)
	return busy, idle
}

// DropOrigin forgets every request owned by origin and returns their ids,
// sorted.
func (t *Table) DropOrigin(origin string) []string {
	return t.dropWhere(func(e Entry) bool { return e.Origin == origin })
}

// DropUnregistered forgets every request whose rank is not registered any
// more (its worker left or changed its dp ranks) and returns their ids,
// sorted.
func (t *Table) DropUnregistered(registered func(kv.WorkerWithDpRank) bool) []string {
	return t.dropWhere(func(e Entry) bool { return !registered(e.Rank) })
}

func (t *Table) dropWhere(match func(Entry) bool) []string {
	var ids []string
	for id, e := range t.entries {
		if match(e) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		t.Untrack(id)
	}
	return ids
}
