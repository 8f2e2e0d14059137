package tracking

import "github.com/kvrouter/kvrouter/kv"

// A client that lost its answer (the replica that routed its request
// died) retries the same request_id through another replica, which
// decides it again. These rules move the request to its new decision
// instead of counting it twice.

// Moved reports where a peer's add moves a request from: the rank the
// table holds it on, when the add is for an id tracked under another
// origin on a different rank. The caller frees the request there before
// applying the add (on the same rank, the rank's sequences replace it:
// sequence.TakeOver).
func (t *Table) Moved(c Change) (kv.WorkerWithDpRank, bool) {
	if c.Step != StepAdd {
		return kv.WorkerWithDpRank{}, false
	}
	e, ok := t.entries[c.RequestID]
	if !ok || e.Origin == c.Origin || e.Rank == c.Rank {
		return kv.WorkerWithDpRank{}, false
	}
	return e.Rank, true
}

// Release forgets a peer's request that this replica decided again
// (self is this replica's id) and returns its entry, so the caller can
// free the peer's record on its rank. Nothing is released for an id the
// table does not hold or holds under self.
func (t *Table) Release(id, self string) (Entry, bool) {
	e, ok := t.entries[id]
	if !ok || e.Origin == self {
		return Entry{}, false
	}
	delete(t.entries, id)
	return e, true
}
