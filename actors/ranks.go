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
	}
	return v
}

func (v *rankView) has(w kv.WorkerWithDpRank) bool { _, ok := v.pids[w]; return ok }
