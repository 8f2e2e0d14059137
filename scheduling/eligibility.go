package scheduling

import (
	"fmt"

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
}

// Eligible filters cands by c. Without constraints it returns cands itself.
// A pinned rank that is not a candidate, or not among the allowed workers,
// and an empty result are ErrNoEligibleWorker.
func Eligible(cands []Candidate, c Constraints) ([]Candidate, error) {
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
		for _, cand := range cands {
			if cand.Worker == pinned {
				return []Candidate{cand}, nil
			}
		}
		return nil, fmt.Errorf("pinned worker %s is not a registered candidate (%d candidates): %w",
			pinned, len(cands), ErrNoEligibleWorker)
	}

	if len(c.AllowedWorkerIDs) == 0 {
		if len(cands) == 0 {
			return nil, fmt.Errorf("no candidates: %w", ErrNoEligibleWorker)
		}
		return cands, nil
	}
	out := make([]Candidate, 0, len(cands))
	for _, cand := range cands {
		if allowed(cand.Worker.WorkerID) {
			out = append(out, cand)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("none of %d candidates is among the allowed workers %v: %w",
			len(cands), c.AllowedWorkerIDs, ErrNoEligibleWorker)
	}
	return out, nil
}
