package tracking

import "github.com/kvrouter/kvrouter/kv"

// Step is what a gossiped change does to a request.
type Step uint8

const (
	StepAdd Step = iota + 1
	StepPrefillCompleted
	StepFree
)

// Change is a peer replica's gossiped change, reduced to what the rules
// need.
type Change struct {
	Origin    string
	Step      Step
	RequestID string
	// Rank and Stride are set for adds only: where the peer routed the
	// request and the router-active-sequence-stride its hashes were
	// sampled with (0 counts as 1).
	Rank   kv.WorkerWithDpRank
	Stride int
}

// Outcome says whether a change must be applied to a rank's sequences and,
// if not, why.
type Outcome uint8

const (
	// Apply: hand the change to the returned rank's active sequences.
	Apply Outcome = iota
	// OwnEcho: this replica's own change came back; it was applied when made.
	OwnEcho
	// UnknownWorker: an add for a rank this replica has not registered (yet).
	UnknownWorker
	// StrideMismatch: an add sampled with another stride; counting its
	// hashes would corrupt the shared-prefix deduplication (Dynamo drops it).
	StrideMismatch
	// NotTracked: a prefill or free of a request this table does not hold
	// (never seen, already freed, or owned by another table).
	NotTracked
)

// ApplyRemote applies a peer's change to the table and says what the
// caller must do with it. self is this replica's id, stride its own
// router-active-sequence-stride, registered reports whether a rank exists.
// A free untracks the request; an add tracks it under the peer's origin.
func (t *Table) ApplyRemote(c Change, self string, stride int, registered func(kv.WorkerWithDpRank) bool) (kv.WorkerWithDpRank, Outcome) {
	if c.Origin == self {
		return kv.WorkerWithDpRank{}, OwnEcho
	}
	switch c.Step {
	case StepAdd:
		if !registered(c.Rank) {
			return c.Rank, UnknownWorker
		}
		if max(c.Stride, 1) != max(stride, 1) {
			return c.Rank, StrideMismatch
		}
		t.Track(c.RequestID, Entry{Rank: c.Rank, Origin: c.Origin})
		return c.Rank, Apply
	case StepPrefillCompleted:
		e, ok := t.Lookup(c.RequestID)
		if !ok {
			return kv.WorkerWithDpRank{}, NotTracked
		}
		return e.Rank, rankOutcome(e.Rank, registered)
	case StepFree:
		e, ok := t.Untrack(c.RequestID)
		if !ok {
			return kv.WorkerWithDpRank{}, NotTracked
		}
		return e.Rank, rankOutcome(e.Rank, registered)
	}
	return kv.WorkerWithDpRank{}, NotTracked
}

func rankOutcome(w kv.WorkerWithDpRank, registered func(kv.WorkerWithDpRank) bool) Outcome {
	if registered(w) {
		return Apply
	}
	return UnknownWorker
}
