package actors

import "github.com/asynkron/protoactor-go/actor"

// priorityMailbox is protoactor's unbounded priority mailbox made to see
// through request envelopes. Its queue ranks what is pushed by
// actor.PriorityMessage, but ctx.Request and RequestFuture push a
// *actor.MessageEnvelope (the message plus its sender), which has no
// priority: every request landed in the default lane, so a shard's score
// request waited behind the whole backlog of KV events queued before it,
// whatever messages/priority.go declared. Here an envelope whose message
// has a priority is pushed inside a prioritized wrapper carrying that
// priority, and the invoker unwraps it before the actor sees it, so
// Sender and Respond work as before.
func priorityMailbox() actor.MailboxProducer {
	inner := actor.UnboundedPriority()
	return func() actor.Mailbox { return &envelopeRanker{Mailbox: inner()} }
}

type envelopeRanker struct{ actor.Mailbox }

// prioritized is an envelope queued in its message's priority lane.
type prioritized struct {
	env      *actor.MessageEnvelope
	priority int8
}

func (p *prioritized) GetPriority() int8 { return p.priority }

func (m *envelopeRanker) PostUserMessage(msg any) {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		if pm, ok := env.Message.(actor.PriorityMessage); ok {
			m.Mailbox.PostUserMessage(&prioritized{env: env, priority: pm.GetPriority()})
			return
		}
	}
	m.Mailbox.PostUserMessage(msg)
}

func (m *envelopeRanker) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.Mailbox.RegisterHandlers(unwrappingInvoker{invoker}, dispatcher)
}

// unwrappingInvoker hands the actor (and its supervisor, on a failure)
// the original envelope.
type unwrappingInvoker struct{ actor.MessageInvoker }

func unwrap(msg any) any {
	if p, ok := msg.(*prioritized); ok {
		return p.env
	}
	return msg
}

func (u unwrappingInvoker) InvokeUserMessage(msg any) {
	u.MessageInvoker.InvokeUserMessage(unwrap(msg))
}

func (u unwrappingInvoker) EscalateFailure(reason any, msg any) {
	u.MessageInvoker.EscalateFailure(reason, unwrap(msg))
}
