package scheduling

import "github.com/kvrouter/kvrouter/kv"

// Overloaded reports whether a rank has more prompt tokens waiting for
// prefill than RouterQueueThreshold × its engine's max_num_batched_tokens,
// i.e. more than threshold engine steps of prefill backlog. It is false
// when queueing is disabled, when the rank's load is unknown (idle), and
// when the engine did not advertise its budget (0): capacity we cannot
// judge never parks requests.
func Overloaded(cfg Config, c Candidate, maxNumBatchedTokens uint64) bool {
	return cfg.RouterQueueEnabled && overloaded(cfg.RouterQueueThreshold, &c, maxNumBatchedTokens)
}

// overloaded is Overloaded with the queue enabled.
func overloaded(threshold float64, c *Candidate, maxNumBatchedTokens uint64) bool {
	if !c.HasLoad || maxNumBatchedTokens == 0 {
		return false
	}
	return float64(c.ActivePrefillTokens) > threshold*float64(maxNumBatchedTokens)
}

// AllOverloaded reports whether every candidate is Overloaded, the
// condition under which Dynamo parks a request instead of routing it.
// maxNumBatchedTokens maps a worker to its engine budget (shared by its dp
// ranks); a missing worker counts as not overloaded. No candidates: false
// (there is nothing to wait for; selection reports the error).
func AllOverloaded(cfg Config, cands []Candidate, maxNumBatchedTokens map[kv.WorkerID]uint64) bool {
	if len(cands) == 0 || !cfg.RouterQueueEnabled {
		return false
	}
	// By index and pointer: a copy of each candidate and of cfg per
	// candidate was most of this loop's cost.
	for i := range cands {
		c := &cands[i]
		if !overloaded(cfg.RouterQueueThreshold, c, maxNumBatchedTokens[c.Worker.WorkerID]) {
			return false
		}
	}
	return true
}
