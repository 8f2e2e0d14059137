package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// crashShard makes a shard panic and stallShard makes it stop answering
// for a while: they exercise supervision and decision timeouts. Only the
// shardFaults middleware, which tests install, knows them.
type (
	crashShard struct{}
	// stallShard closes entered (when set) as the stall begins: a score
	// request sent before that would overtake the stall in the mailbox.
	stallShard struct {
		d       time.Duration
		entered chan struct{}
	}
	// holdShard blocks the shard until release is closed: messages sent
	// meanwhile queue in its mailbox, in whatever order it keeps them.
	holdShard struct{ release <-chan struct{} }
)

func shardFaults(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
		switch m := env.Message.(type) {
		case *crashShard:
			panic("shard crash requested")
		case *stallShard:
			if m.entered != nil {
				close(m.entered)
			}
			time.Sleep(m.d)
			return
		case *holdShard:
			<-m.release
			return
		}
		next(ctx, env)
	}
}

// crashScheduler makes the scheduler panic (schedulerFaults, installed by
// startRouter): its supervisor restarts it as a fresh instance.
type crashScheduler struct{}

func schedulerFaults(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
		if _, ok := env.Message.(*crashScheduler); ok {
			panic("scheduler crash requested")
		}
		next(ctx, env)
	}
}
