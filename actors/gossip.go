package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/messages"
)

// gossiper publishes this replica's active-sequence changes to its peers.
// The scheduler publishes the changes of requests it routed; the
// replication edge those it applies for a peer's request (a client may
// free a request through another replica than the one that routed it).
type gossiper struct {
	replica string
	publish func(*messages.SequenceEvent) // nil: no cluster
	seq     atomic.Uint64                 // last sequence number stamped
}

func (g *gossiper) send(ev *messages.SequenceEvent) {
	if g.publish == nil {
		return
	}
	ev.Origin, ev.Seq = g.replica, g.seq.Add(1)
	g.publish(ev)
}

// step hands a request's lifecycle step to its rank's sequence actor and
// gossips it when decide.LifecycleStep says so (true when it did).
func (g *gossiper) step(ctx actor.Context, rank *actor.PID, m *messages.RequestLifecycle) bool {
	msg, ev := decide.LifecycleStep(m)
	if msg != nil {
		ctx.Send(rank, msg)
	}
	if ev == nil {
		return false
	}
	g.send(ev)
	return true
}
