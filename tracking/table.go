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
	// Client names who routed a local entry (the bearer token's or the
	// peer address's key); "" for peers' entries and unnamed callers.
	Client string
}

// Table maps request ids to their rank (and owner and call token), and
// counts the entries of each named client. The count map holds only
// clients with at least one entry, so it is bounded by the table.
type Table struct {
	entries map[string]Entry
	clients map[string]int
}

// New returns an empty table.
func New() *Table {
	return &Table{entries: map[string]Entry{}, clients: map[string]int{}}
}

// ClientActive is how many tracked requests client holds (0 for the
// unnamed client, which is never counted).
func (t *Table) ClientActive(client string) int {
	if client == "" || len(t.clients) == 0 {
		return 0
	}
	return t.clients[client]
}

// Clients is how many named clients hold a tracked request.
func (t *Table) Clients() int { return len(t.clients) }

// TopClient is the named client holding the most tracked requests (ties:
// the smallest name) and how many; "" and 0 when none. O(clients): for
// scrapes, not decisions.
func (t *Table) TopClient() (string, int) {
	top, most := "", 0
	for c, n := range t.clients {
		if n > most || (n == most && c < top) {
			top, most = c, n
		}
	}
	return top, most
}

func (t *Table) count(client string, delta int) {
	if client == "" {
		return
	}
	n := t.clients[client] + delta
	if n <= 0 {
		delete(t.clients, client)
		return
	}
	t.clients[client] = n
}

// Len is the number of tracked requests.
func (t *Table) Len() int { return len(t.entries) }

// Lookup returns a tracked request's entry.
func (t *Table) Lookup(id string) (Entry, bool) {
	e, ok := t.entries[id]
	return e, ok
}

// Track records a request, replacing any earlier entry of the same id (a
// re-used id moves to its new rank).
func (t *Table) Track(id string, e Entry) {
	// With no named client counted every entry is unnamed: the earlier
	// entry, if any, has no count to take back (no lookup per request).
	if len(t.clients) > 0 {
		if old, ok := t.entries[id]; ok {
			t.count(old.Client, -1)
		}
	}
	t.entries[id] = e
	t.count(e.Client, 1)
}

// Untrack forgets a request and returns its entry (false: not tracked).
func (t *Table) Untrack(id string) (Entry, bool) {
	e, ok := t.entries[id]
	if ok {
		delete(t.entries, id)
		t.count(e.Client, -1)
	}
	return e, ok
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
