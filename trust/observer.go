package trust

import (
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// StreamObserver is what a KV event source reports about a rank's
// stream. Calls must not block (the router's implementation only sends
// a message to the actor that owns the tracker).
type StreamObserver interface {
	// GapOpened: events of the rank were lost (an event-id or sequence
	// gap); missed is how many, 0 when unknown.
	GapOpened(rank kv.WorkerWithDpRank, missed uint64)
	// ReplayCompleted: a replay filled every hole of the rank's stream.
	ReplayCompleted(rank kv.WorkerWithDpRank)
	// ReplayFailed: a replay failed, timed out, or the engine's buffer did
	// not reach back far enough (holes remain).
	ReplayFailed(rank kv.WorkerWithDpRank, reason string)
}

// ParityObserver receives, per proxied request, the router's predicted
// cached tokens for the rank that served it and the engine's confirmed
// cached tokens (usage.prompt_tokens_details.cached_tokens).
type ParityObserver interface {
	ObserveParity(rank kv.WorkerWithDpRank, predictedCachedTokens, confirmedCachedTokens int, now time.Time)
}

// NopStreamObserver discards everything (a source with no router).
type NopStreamObserver struct{}

func (NopStreamObserver) GapOpened(kv.WorkerWithDpRank, uint64)    {}
func (NopStreamObserver) ReplayCompleted(kv.WorkerWithDpRank)      {}
func (NopStreamObserver) ReplayFailed(kv.WorkerWithDpRank, string) {}
