package actors

import (
	"testing"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// The decisions a decision folds in (scheduling.AddRouted) are exactly
// those its loads do not include: per rank, the adds numbered past what
// the rank's publication (or the LoadQuery reply read) had applied.
func TestRoutedUnseen(t *testing.T) {
	w1, w2 := kv.WorkerWithDpRank{WorkerID: 1}, kv.WorkerWithDpRank{WorkerID: 2}
	s := &schedulerActor{board: newLoadBoard()}
	for _, w := range []kv.WorkerWithDpRank{w1, w2} {
		s.board.ranks[w] = &boardEntry{roots: map[uint64]struct{}{}}
	}
	p := &pending{}
	if got := s.routedUnseen(p); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	const n = maxRouted + 10
	for i := 1; i <= n; i++ {
		w := w1
		if i%2 == 0 {
			w = w2
		}
		e, onRank := s.board.sent(w)
		s.noteRouted(scheduling.Routed{Worker: w, NewBlocks: uint64(i)}, e, onRank)
	}
	// Nothing applied: the last maxRouted, oldest first.
	all := s.routedUnseen(p)
	if len(all) != maxRouted || all[0].NewBlocks != n-maxRouted+1 || all[maxRouted-1].NewBlocks != n {
		t.Fatalf("ring: %d entries, first %d last %d", len(all), all[0].NewBlocks, all[len(all)-1].NewBlocks)
	}
	publish := func(w kv.WorkerWithDpRank, applied uint64) {
		s.board.apply(&messages.RankLoad{Worker: rankMsg(w), AddsApplied: applied}, 0)
	}
	// w2 applied everything, w1 all but its last two adds (n-1 and n-3).
	publish(w2, n/2)
	publish(w1, n/2-2)
	got := s.routedUnseen(p)
	if len(got) != 2 || got[0].NewBlocks != n-3 || got[1].NewBlocks != n-1 {
		t.Fatalf("unseen %v, want decisions %d and %d", got, n-3, n-1)
	}
	publish(w1, n/2)
	if s.board.unseen != 0 {
		t.Fatalf("board counts %d unseen adds after every rank applied all", s.board.unseen)
	}
	if got := s.routedUnseen(p); len(got) != 0 {
		t.Fatalf("all applied: %v", got)
	}
	// A LoadQuery reply read before w2's last add was applied: that add
	// is folded in for this decision although the board has it.
	p.loads = map[kv.WorkerWithDpRank]*messages.LoadReply{w2: {Worker: rankMsg(w2), AddsApplied: n/2 - 1}}
	got = s.routedUnseen(p)
	if len(got) != 1 || got[0].NewBlocks != n {
		t.Fatalf("lagging reply: unseen %v, want decision %d", got, n)
	}
}
