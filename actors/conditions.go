package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// SetWorkerCondition sets (on) or clears one condition of a registered
// worker: kv.WorkerBusy (ranks: the busy dp ranks, nil = every rank),
// kv.WorkerUnhealthy or kv.WorkerDraining. A rank with a condition takes
// no new requests (scheduling.Routable); its requests in flight finish. A
// draining worker is removed after Config.DrainGrace. It returns once the
// scheduler has the new rank table queued ahead of anything the caller
// sends next; known is false for a worker that is not registered, changed
// false when the condition already was so.
func (r *Router) SetWorkerCondition(ctx context.Context, id kv.WorkerID, cond kv.WorkerState, on bool, ranks []uint32, reason string) (known, changed bool, err error) {
	if cond == kv.WorkerActive || cond >= kv.NumWorkerStates {
		return false, false, fmt.Errorf("%w: condition %v cannot be set", ErrBadRequest, cond)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, registerTimeout)
		defer cancel()
	}
	res, err := r.ask(ctx, r.registry, &messages.WorkerCondition{
		WorkerId: uint64(id), Condition: messages.WorkerState(cond), On: on, DpRanks: ranks, Reason: reason,
		NowUnixNano: time.Now().UnixNano(),
	})
	if err != nil {
		return false, false, fmt.Errorf("worker %d condition %v: %w", id, cond, err)
	}
	reply := res.(*messages.WorkerConditionReply)
	return reply.Known, reply.Changed, nil
}
