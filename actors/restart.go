package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/messages"
)

// restartNotice is kept outside an actor instance (in its props) to tell
// a restart from the first start: a restarted scheduler or replication
// edge is a fresh instance with an empty rank view, so it asks the
// registry to publish the rank table again (a stable fleet may not change
// it for hours).
type restartNotice struct{ starts int }

func (n *restartNotice) started(ctx actor.Context, registry *actor.PID) {
	if n.starts++; n.starts > 1 {
		ctx.Send(registry, &messages.RankTableQuery{})
	}
}
