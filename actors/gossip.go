package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

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
// gossips prefill completions and frees (true when it did). Output growth
// and lease renewals are not gossiped (as in Dynamo): it is frequent and peers converge on the
// next add or free anyway.
func (g *gossiper) step(ctx actor.Context, rank *actor.PID, m *messages.RequestLifecycle) bool {
	switch st := m.Step.(type) {
	case *messages.RequestLifecycle_PrefillCompleted:
		ctx.Send(rank, st.PrefillCompleted)
		g.send(&messages.SequenceEvent{Data: &messages.SequenceEvent_PrefillCompleted{PrefillCompleted: st.PrefillCompleted}})
		return true
	case *messages.RequestLifecycle_Free:
		ctx.Send(rank, st.Free)
		g.send(&messages.SequenceEvent{Data: &messages.SequenceEvent_Free{Free: st.Free}})
		return true
	case *messages.RequestLifecycle_OutputBlock:
		ctx.Send(rank, st.OutputBlock)
	case *messages.RequestLifecycle_RenewLease:
		// Only the routing replica holds the lease: nothing to gossip.
		ctx.Send(rank, st.RenewLease)
	}
	return false
}
