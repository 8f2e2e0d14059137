package tracking

import (
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func TestMoved(t *testing.T) {
	r1, r2 := kv.WorkerWithDpRank{WorkerID: 1}, kv.WorkerWithDpRank{WorkerID: 2}
	tab := New()
	tab.Track("x", Entry{Rank: r1, Origin: "dead"})
	tests := []struct {
		name string
		c    Change
		from kv.WorkerWithDpRank
		ok   bool
	}{
		{"another origin on another rank moves it", Change{Origin: "b", Step: StepAdd, RequestID: "x", Rank: r2}, r1, true},
		{"another origin on the same rank: the rank replaces it", Change{Origin: "b", Step: StepAdd, RequestID: "x", Rank: r1}, kv.WorkerWithDpRank{}, false},
		{"the same origin again is not a move", Change{Origin: "dead", Step: StepAdd, RequestID: "x", Rank: r2}, kv.WorkerWithDpRank{}, false},
		{"an unknown id is not a move", Change{Origin: "b", Step: StepAdd, RequestID: "y", Rank: r2}, kv.WorkerWithDpRank{}, false},
		{"a free is not a move", Change{Origin: "b", Step: StepFree, RequestID: "x"}, kv.WorkerWithDpRank{}, false},
	}
	for _, tt := range tests {
		from, ok := tab.Moved(tt.c)
		if from != tt.from || ok != tt.ok {
			t.Errorf("%s: got %v %v, want %v %v", tt.name, from, ok, tt.from, tt.ok)
		}
	}
}

func TestRelease(t *testing.T) {
	r1 := kv.WorkerWithDpRank{WorkerID: 1}
	tab := New()
	tab.Track("peer", Entry{Rank: r1, Origin: "dead"})
	tab.Track("own", Entry{Rank: r1, Origin: "self"})
	if e, ok := tab.Release("peer", "self"); !ok || e.Origin != "dead" || e.Rank != r1 {
		t.Fatalf("release of a peer's request: %+v %v", e, ok)
	}
	if _, ok := tab.Lookup("peer"); ok {
		t.Fatal("released request still tracked")
	}
	if _, ok := tab.Release("own", "self"); ok {
		t.Fatal("released this replica's own request")
	}
	if _, ok := tab.Release("none", "self"); ok {
		t.Fatal("released an unknown id")
	}
}
