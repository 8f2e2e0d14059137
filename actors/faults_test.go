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
	stallShard struct{ d time.Duration }
)

func shardFaults(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
		switch m := env.Message.(type) {
		case *crashShard:
			panic("shard crash requested")
		case *stallShard:
			time.Sleep(m.d)
			return
		}
		next(ctx, env)
	}
}
