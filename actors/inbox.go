package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// inbox is a reusable reply address for the Router's calls into the
// actors. protoactor's RequestFuture registers a new process (a generated
// id in the process registry's concurrent map) and a timer for every call;
// a decision makes two calls (route, free), and that bookkeeping was ~7%
// of its CPU. An inbox is registered once and reused for calls that got
// their reply; one whose call timed out is unregistered and dropped, so a
// late reply can never reach the next caller.
type inbox struct {
	pid   *actor.PID
	reply chan any    // one reply per call
	timer *time.Timer // the call's timeout, reset per call (stopped between calls)
}

func (b *inbox) SendUserMessage(_ *actor.PID, m any) {
	if env, ok := m.(*actor.MessageEnvelope); ok {
		m = env.Message
	}
	select {
	case b.reply <- m:
	default: // a second answer to one call cannot happen; drop it
	}
}

func (*inbox) SendSystemMessage(*actor.PID, any) {}
func (*inbox) Stop(*actor.PID)                   {}

// inboxes is a bounded free list of inboxes.
type inboxes struct {
	registry *actor.ProcessRegistryValue
	free     chan *inbox
}

func newInboxes(sys *actor.ActorSystem) *inboxes {
	return &inboxes{registry: sys.ProcessRegistry, free: make(chan *inbox, 256)}
}

func (p *inboxes) get() *inbox {
	select {
	case b := <-p.free:
		return b
	default:
	}
	b := &inbox{reply: make(chan any, 1), timer: time.NewTimer(time.Hour)}
	b.timer.Stop()
	b.pid, _ = p.registry.Add(b, "inbox$"+p.registry.NextId()) // ids are unique: never taken
	return b
}

// call sends msg to pid with an inbox as its sender and waits up to
// timeout for the answer; ok is false on timeout.
func (p *inboxes) call(root *actor.RootContext, pid *actor.PID, msg any, timeout time.Duration) (res any, ok bool) {
	return p.callThen(root, pid, msg, timeout, nil)
}

// callThen is call that runs sent (if not nil) once msg is in pid's
// mailbox, before it waits.
func (p *inboxes) callThen(root *actor.RootContext, pid *actor.PID, msg any, timeout time.Duration, sent func()) (res any, ok bool) {
	b := p.get()
	root.RequestWithCustomSender(pid, msg, b.pid)
	if sent != nil {
		sent()
	}
	// Since Go 1.23 a stopped or reset timer never delivers a stale tick,
	// so the inbox's timer is reused rather than allocated per call.
	b.timer.Reset(timeout)
	select {
	case res = <-b.reply:
		b.timer.Stop()
		select {
		case p.free <- b:
		default:
			p.registry.Remove(b.pid)
		}
		return res, true
	case <-b.timer.C:
		p.registry.Remove(b.pid) // a late reply goes to dead letters
		return nil, false
	}
}
