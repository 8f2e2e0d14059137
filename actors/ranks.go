package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// rankView is the registry's rank set as the scheduler and the
// replication edge hold it: rebuilt from each RankTable, read-only after.
// The decision reads the embedded decide.Ranks; pids are the ranks'
// sequence actors on this system.
type rankView struct {
	decide.Ranks
	pids map[kv.WorkerWithDpRank]*actor.PID
}

func emptyRankView() *rankView {
	v := &rankView{pids: map[kv.WorkerWithDpRank]*actor.PID{}}
	v.Budgets = map[kv.WorkerID]uint64{}
	v.Has = v.has
	return v
}

// newRankView resolves the table's sequence-actor ids on this system.
func newRankView(t *messages.RankTable, address string) *rankView {
	v := &rankView{pids: make(map[kv.WorkerWithDpRank]*actor.PID, len(t.Ranks))}
	v.List = make([]kv.WorkerWithDpRank, 0, len(t.Ranks))
	v.Budgets = make(map[kv.WorkerID]uint64, len(t.Ranks))
	v.Has = v.has
	for _, e := range t.Ranks {
		w := rankOf(e.Worker)
		v.List = append(v.List, w)
		v.pids[w] = actor.NewPID(address, e.Pid)
		v.Budgets[w.WorkerID] = e.MaxNumBatchedTokens
		if e.TotalKvBlocks > 0 {
			if v.Capacity == nil {
				v.Capacity = map[kv.WorkerWithDpRank]uint64{}
			}
			v.Capacity[w] = e.TotalKvBlocks
		}
		if role := roleOf(e.Role); role != kv.RoleBoth {
			if v.Roles == nil {
				v.Roles = map[kv.WorkerWithDpRank]kv.Role{}
			}
			v.Roles[w] = role
		}
		if e.State != messages.WorkerState_WORKER_STATE_ACTIVE {
			if v.States == nil {
				v.States = map[kv.WorkerWithDpRank]kv.WorkerState{}
			}
			v.States[w] = kv.WorkerState(e.State)
		}
	}
	return v
}

func (v *rankView) has(w kv.WorkerWithDpRank) bool { _, ok := v.pids[w]; return ok }

// pid names w's sequence actor (decide.Board.Sync).
func (v *rankView) pid(w kv.WorkerWithDpRank) (string, bool) {
	if p, ok := v.pids[w]; ok {
		return p.Id, true
	}
	return "", false
}
