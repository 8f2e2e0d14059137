package decide

import (
	"testing"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// The decisions a decision folds in (scheduling.AddRouted) are exactly
// those its loads do not include: per rank, the adds numbered past what
// the rank's publication (or the LoadQuery reply read) had applied.
func TestBoardUnseen(t *testing.T) {
	w1, w2 := kv.WorkerWithDpRank{WorkerID: 1}, kv.WorkerWithDpRank{WorkerID: 2}
	b := NewBoard()
	b.Sync([]kv.WorkerWithDpRank{w1, w2}, func(w kv.WorkerWithDpRank) (string, bool) { return w.String(), true },
		func(kv.WorkerWithDpRank) {})
	if got := b.Unseen(nil); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	const n = maxRouted + 10
	for i := 1; i <= n; i++ {
		w := w1
		if i%2 == 0 {
			w = w2
		}
		b.Recorded(scheduling.Routed{Worker: w, NewBlocks: uint64(i)})
	}
	// Nothing applied: the last maxRouted, oldest first.
	all := b.Unseen(nil)
	if len(all) != maxRouted || all[0].NewBlocks != n-maxRouted+1 || all[maxRouted-1].NewBlocks != n {
		t.Fatalf("ring: %d entries, first %d last %d", len(all), all[0].NewBlocks, all[len(all)-1].NewBlocks)
	}
	publish := func(w kv.WorkerWithDpRank, applied uint64) {
		b.Apply(&messages.RankLoad{Worker: RankMsg(w), AddsApplied: applied}, 0)
	}
	// w2 applied everything, w1 all but its last two adds (n-1 and n-3).
	publish(w2, n/2)
	publish(w1, n/2-2)
	got := b.Unseen(nil)
	if len(got) != 2 || got[0].NewBlocks != n-3 || got[1].NewBlocks != n-1 {
		t.Fatalf("unseen %v, want decisions %d and %d", got, n-3, n-1)
	}
	publish(w1, n/2)
	if b.unseen != 0 {
		t.Fatalf("board counts %d unseen adds after every rank applied all", b.unseen)
	}
	if got := b.Unseen(nil); len(got) != 0 {
		t.Fatalf("all applied: %v", got)
	}
	// A LoadQuery reply read before w2's last add was applied: that add
	// is folded in for this decision although the board has it.
	got = b.Unseen(map[kv.WorkerWithDpRank]*messages.LoadReply{w2: {Worker: RankMsg(w2), AddsApplied: n/2 - 1}})
	if len(got) != 1 || got[0].NewBlocks != n {
		t.Fatalf("lagging reply: unseen %v, want decision %d", got, n)
	}
	// A rank that re-registers (a new sequence actor) starts over: its
	// recorded adds went to an actor that is gone.
	b.Sync([]kv.WorkerWithDpRank{w1, w2}, func(w kv.WorkerWithDpRank) (string, bool) { return "new", true },
		func(kv.WorkerWithDpRank) {})
	if got := b.Unseen(map[kv.WorkerWithDpRank]*messages.LoadReply{w2: {Worker: RankMsg(w2)}}); len(got) != 0 {
		t.Fatalf("after re-registration: %v", got)
	}
}
