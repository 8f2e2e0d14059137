package actors

import (
	"testing"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/scheduling"
)

func TestRoutedRing(t *testing.T) {
	s := &schedulerActor{}
	if got := s.routedSince(0); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for i := 1; i <= maxRouted+10; i++ {
		s.noteRouted(scheduling.Routed{Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(i)}})
	}
	got := s.routedSince(maxRouted + 7)
	if len(got) != 3 || got[0].Worker.WorkerID != maxRouted+8 || got[2].Worker.WorkerID != maxRouted+10 {
		t.Fatalf("last three: %v", got)
	}
	// Older than the ring holds: the last maxRouted, oldest first.
	all := s.routedSince(0)
	if len(all) != maxRouted || all[0].Worker.WorkerID != 11 || all[maxRouted-1].Worker.WorkerID != maxRouted+10 {
		t.Fatalf("ring: %d entries, first %v last %v", len(all), all[0].Worker, all[len(all)-1].Worker)
	}
	if got := s.routedSince(maxRouted + 10); len(got) != 0 {
		t.Fatalf("nothing newer: %v", got)
	}
}
