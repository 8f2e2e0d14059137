package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// rankView is the registry's rank set as the scheduler and the
// replication edge hold it: rebuilt from each RankTable, read-only after.
type rankView struct {
	list    []kv.WorkerWithDpRank // sorted: the stable candidate order
	pids    map[kv.WorkerWithDpRank]*actor.PID
	budgets map[kv.WorkerID]uint64
	// states holds the ranks that are not active (nil when all are), for
	// scheduling.Constraints.State.
	states map[kv.WorkerWithDpRank]kv.WorkerState
	// capacity is each rank's KV cache in blocks (the ttft cost's
	// headroom); absent when the worker did not announce it.
	capacity map[kv.WorkerWithDpRank]uint64
	// roles holds the ranks whose worker is not RoleBoth (nil when none
	// is: the fleet is aggregated and decisions take the usual path).
	roles map[kv.WorkerWithDpRank]kv.Role
}

func emptyRankView() *rankView {
	return &rankView{pids: map[kv.WorkerWithDpRank]*actor.PID{}, budgets: map[kv.WorkerID]uint64{}}
}

// newRankView resolves the table's sequence-actor ids on this system.
func newRankView(t *messages.RankTable, address string) *rankView {
	v := &rankView{
		list:    make([]kv.WorkerWithDpRank, 0, len(t.Ranks)),
		pids:    make(map[kv.WorkerWithDpRank]*actor.PID, len(t.Ranks)),
		budgets: make(map[kv.WorkerID]uint64, len(t.Ranks)),
	}
	for _, e := range t.Ranks {
		w := rankOf(e.Worker)
		v.list = append(v.list, w)
		v.pids[w] = actor.NewPID(address, e.Pid)
		v.budgets[w.WorkerID] = e.MaxNumBatchedTokens
		if e.TotalKvBlocks > 0 {
			if v.capacity == nil {
				v.capacity = map[kv.WorkerWithDpRank]uint64{}
			}
			v.capacity[w] = e.TotalKvBlocks
		}
		if role := roleOf(e.Role); role != kv.RoleBoth {
			if v.roles == nil {
				v.roles = map[kv.WorkerWithDpRank]kv.Role{}
			}
			v.roles[w] = role
		}
		if e.State != messages.WorkerState_WORKER_STATE_ACTIVE {
			if v.states == nil {
				v.states = map[kv.WorkerWithDpRank]kv.WorkerState{}
			}
			v.states[w] = kv.WorkerState(e.State)
		}
	}
	return v
}

// disaggregated reports whether the fleet has prefill and decode pools.
func (v *rankView) disaggregated() bool { return v.roles != nil }

// role is a rank's role (both when unlisted).
func (v *rankView) role(w kv.WorkerWithDpRank) kv.Role { return v.roles[w] }

func (v *rankView) has(w kv.WorkerWithDpRank) bool { _, ok := v.pids[w]; return ok }

// stateFunc is the view's rank states for scheduling.Constraints (nil
// when every rank is active, which keeps the unconstrained path free).
func (v *rankView) stateFunc() func(kv.WorkerWithDpRank) kv.WorkerState {
	if v.states == nil {
		return nil
	}
	return func(w kv.WorkerWithDpRank) kv.WorkerState { return v.states[w] }
}
