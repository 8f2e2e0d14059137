package actors

import "time"

// Observer receives what the actors see, for metrics. Calls come from
// actor goroutines and must be cheap and non-blocking.
type Observer interface {
	// DecisionPhase records the duration of a phase of one routing
	// decision: "hash", "score" (fan-out until all replies), "select",
	// "total".
	DecisionPhase(phase string, d time.Duration)
	// Decision records a decision's outcome ("routed", "query",
	// "no_worker", "overloaded", "queued", "bad_request", "cancelled",
	// "retried") and, when
	// routed, the overlap found and the prompt's block count.
	Decision(outcome string, overlapBlocks uint32, requestBlocks int)
	DecisionDegraded(reason string)
	// Disaggregation records how a decision in a disaggregated fleet
	// prefilled: "remote", or locally because of "short_prompt",
	// "no_prefill_worker" or "same_rank" (scheduling.DisaggDecision.Why).
	Disaggregation(path string)
	// DecisionClose counts a decision whose runner-up scored within
	// noise of the winner (decide.IsClose).
	DecisionClose()
	// DecisionExplained counts a decision whose route receipt was built
	// (asked for, sampled, or debug logging).
	DecisionExplained()
	EventApplied(kind string)
	EventDropped(reason string)
	ShardRestarted(shard uint32, intact bool)
	WorkerRejected(reason string)
	// StrideMismatch counts a peer's add dropped for its different
	// router_active_sequence_stride.
	StrideMismatch()
	// BacklogDropped counts a message dropped because an actor's backlog
	// was at its bound ("shard", "replication").
	BacklogDropped(queue string)
	QueueDepth(n int)
	// SharedCache records a routed decision's shared-tier prefix against
	// the prompt's blocks, and how many of those shared blocks lie beyond
	// the chosen worker's (rounded effective) overlap: Dynamo's
	// router_shared_cache_hit_rate and router_shared_cache_beyond_blocks.
	SharedCache(sharedBlocks, beyondBlocks uint32, requestBlocks int)
	// SessionEvent counts n sticky-session table changes: "bound",
	// "ended", "evicted", "expired", "rejected".
	SessionEvent(event string, n int)
	// SessionMoved counts a session moved off its rank (sessions.MoveReason).
	SessionMoved(reason string)
	// SessionCount is the session table's size.
	SessionCount(n int)
	// AdmissionRefused counts a route refused at an active-request bound:
	// "active_requests" (the replica's), "client_active_requests" (its
	// client's own).
	AdmissionRefused(reason string)
	// RequestsExpired counts n requests freed without a free: "lease"
	// (this replica's, when their lease ran out) or "stale" (older than
	// the stale-request expiry).
	RequestsExpired(reason string, n int)
}

// NopObserver discards everything.
type NopObserver struct{}

func (NopObserver) DecisionPhase(string, time.Duration) {}
func (NopObserver) Decision(string, uint32, int)        {}
func (NopObserver) DecisionDegraded(string)             {}
func (NopObserver) Disaggregation(string)               {}
func (NopObserver) DecisionClose()                      {}
func (NopObserver) DecisionExplained()                  {}
func (NopObserver) EventApplied(string)                 {}
func (NopObserver) EventDropped(string)                 {}
func (NopObserver) ShardRestarted(uint32, bool)         {}
func (NopObserver) WorkerRejected(string)               {}
func (NopObserver) StrideMismatch()                     {}
func (NopObserver) BacklogDropped(string)               {}
func (NopObserver) QueueDepth(int)                      {}
func (NopObserver) SharedCache(uint32, uint32, int)     {}
func (NopObserver) SessionEvent(string, int)            {}
func (NopObserver) SessionMoved(string)                 {}
func (NopObserver) SessionCount(int)                    {}
func (NopObserver) AdmissionRefused(string)             {}
func (NopObserver) RequestsExpired(string, int)         {}
