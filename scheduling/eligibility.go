package scheduling

import (
	"fmt"
	"strings"

	"github.com/kvrouter/kvrouter/kv"
)

// Constraints restrict where one request may go.
type Constraints struct {
	// Pinned forces one rank (Dynamo's pinned_worker, e.g. the decode rank
	// chosen by a disaggregated prefill step).
	Pinned *kv.WorkerWithDpRank
	// AllowedWorkerIDs, when non-empty, limits the request to these workers
	// (every dp rank of each).
	AllowedWorkerIDs []kv.WorkerID
	// State is each rank's state (nil: every rank is active); ranks that
	// are not Routable are skipped.
	State func(kv.WorkerWithDpRank) kv.WorkerState
}

// Routable is the one rule on worker states: only an active rank takes a
// new request, except that a request pinned to a busy rank still goes
// there (its caller chose that rank — the decode rank of a disaggregated
// request — and the engine is alive, only loaded). Draining ranks (gone
// from discovery) and unhealthy ones (failed health check, pod not Ready)
// never take new requests; their requests in flight finish.
func Routable(s kv.WorkerState, pinned bool) bool {
	return s == kv.WorkerActive || (pinned && s == kv.WorkerBusy)
}

// Eligible filters cands by c. Without constraints it returns cands itself.
// A pinned rank that is not a candidate, or not among the allowed workers,
// and an empty result are ErrNoEligibleWorker.
func Eligible(cands []Candidate, c Constraints) ([]Candidate, error) {
	return eligible(cands, func(cand Candidate) kv.WorkerWithDpRank { return cand.Worker }, c)
}

// EligibleRanks is Eligible over the registered ranks themselves: the
// scheduler applies it before the fan-out, so constrained-out ranks are
// never asked for their load.
func EligibleRanks(ranks []kv.WorkerWithDpRank, c Constraints) ([]kv.WorkerWithDpRank, error) {
	return eligible(ranks, func(w kv.WorkerWithDpRank) kv.WorkerWithDpRank { return w }, c)
}

// eligible is the one rule behind Eligible and EligibleRanks.
func eligible[T any](items []T, rankOf func(T) kv.WorkerWithDpRank, c Constraints) ([]T, error) {
	if len(items) == 0 {
		return nil, fmt.Errorf("no workers are registered: %w", ErrNoEligibleWorker)
	}
	allowed := func(kv.WorkerID) bool { return true }
	if len(c.AllowedWorkerIDs) > 0 {
		set := make(map[kv.WorkerID]struct{}, len(c.AllowedWorkerIDs))
		for _, id := range c.AllowedWorkerIDs {
			set[id] = struct{}{}
		}
		allowed = func(id kv.WorkerID) bool { _, ok := set[id]; return ok }
	}

	if c.Pinned != nil {
		pinned := *c.Pinned
		if !allowed(pinned.WorkerID) {
			return nil, fmt.Errorf("pinned worker %s is not among the allowed workers %v: %w",
				pinned, c.AllowedWorkerIDs, ErrNoEligibleWorker)
		}
		for _, it := range items {
			if rankOf(it) != pinned {
				continue
			}
			if c.State != nil {
				if st := c.State(pinned); !Routable(st, true) {
					return nil, fmt.Errorf("pinned worker %s is %s: %w", pinned, st, ErrNoEligibleWorker)
				}
			}
			return []T{it}, nil
		}
		return nil, fmt.Errorf("pinned worker %s is not a registered candidate (%d candidates): %w",
			pinned, len(items), ErrNoEligibleWorker)
	}

	if len(c.AllowedWorkerIDs) == 0 && c.State == nil {
		return items, nil
	}
	out := make([]T, 0, len(items))
	var excluded [kv.NumWorkerStates]int
	inAllowed := 0
	for _, it := range items {
		w := rankOf(it)
		if !allowed(w.WorkerID) {
			continue
		}
		inAllowed++
		if c.State != nil {
			if st := c.State(w); !Routable(st, false) {
				excluded[min(st, kv.NumWorkerStates-1)]++
				continue
			}
		}
		out = append(out, it)
	}
	switch {
	case inAllowed == 0:
		return nil, fmt.Errorf("none of %d candidates is among the allowed workers %v: %w",
			len(items), c.AllowedWorkerIDs, ErrNoEligibleWorker)
	case len(out) == 0:
		var parts []string
		for st := kv.WorkerBusy; st < kv.NumWorkerStates; st++ {
			if n := excluded[st]; n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n, st))
			}
		}
		return nil, fmt.Errorf("no routable worker rank: of %d candidates, %s: %w",
			inAllowed, strings.Join(parts, ", "), ErrNoEligibleWorker)
	}
	return out, nil
}
