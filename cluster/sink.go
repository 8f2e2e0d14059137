package cluster

import (
	"context"

	"github.com/kvrouter/kvrouter/messages"
)

// Sink is the replica-side holder of the fleet's active sequences (in
// kvrouter, the router's scheduler and sequence actors). A Node feeds it
// what peers routed and asks it for state during anti-entropy.
//
// Concurrency contract:
//
//   - ApplyRemote, DropOrigin and ReplaceOrigin are called from the Node's
//     goroutines (the apply loop, and memberlist's event loop for
//     DropOrigin) and must not block: the router forwards each call to its
//     actors with a non-blocking send and returns. The Node makes them one
//     at a time, under a lock, in the order they must take effect; the
//     sink must preserve that order (one FIFO mailbox per holder does).
//   - OriginDigest is called from the apply loop, about once per peer per
//     AntiEntropyInterval, and may block until ctx is done (it asks
//     actors); applying waits meanwhile. OwnedRequests is called from its
//     own goroutine when a peer asks for our state. Neither is ever called
//     from memberlist's loops.
//   - Events handed to the sink are not modified by the Node afterwards,
//     and the sink must not modify them either.
type Sink interface {
	// ApplyRemote applies one event a peer routed (ev.Origin is the peer,
	// never this replica). Events of one origin arrive in Seq order;
	// duplicates of an Add are ignored by the holder, Free and
	// PrefillCompleted of unknown requests are no-ops.
	ApplyRemote(ev *messages.SequenceEvent)

	// DropOrigin forgets every request routed by origin: memberlist
	// declared that replica dead or it left.
	DropOrigin(origin string)

	// ReplaceOrigin replaces everything held for origin with evs, that
	// origin's full state in the OwnedRequests form.
	ReplaceOrigin(origin string, evs []*messages.SequenceEvent)

	// OriginDigest summarises what is held for origin (see Digest), and
	// must reflect every event handed to the sink before the call.
	OriginDigest(ctx context.Context, origin string) (Digest, error)

	// OwnedRequests returns this replica's own in-flight requests as the
	// events that recreate them: an Add per request followed, when its
	// prefill is done, by a PrefillCompleted. It must reflect at least
	// every event already passed to Node.Publish (the router applies a
	// decision locally before publishing it); later ones may be included.
	//
	// Every change to the replica's own requests must be published,
	// stale-request expiry included: peers compare their view with the
	// digest of the published stream, so an unpublished local change would
	// make them ask for a repair again and again.
	OwnedRequests(ctx context.Context) ([]*messages.SequenceEvent, error)
}

// BatchSink is an optional Sink extension: a run of one origin's events,
// in Seq order, handed over at once (one actor message instead of one per
// event: applying peers' events is the cluster's main cost per decision).
// The slice belongs to the Node: the sink must copy it if it keeps it.
type BatchSink interface {
	ApplyRemoteBatch(evs []*messages.SequenceEvent)
}
