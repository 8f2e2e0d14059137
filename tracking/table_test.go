package tracking

import (
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func rk(w uint64, dp uint32) kv.WorkerWithDpRank {
	return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(w), DpRank: dp}
}

func TestTableTracks(t *testing.T) {
	tb := New()
	tb.Track("a", Entry{Rank: rk(1, 0), Origin: "r1"})
	tb.Track("c", Entry{Rank: rk(2, 0), Origin: "r2"})
	// A re-used id moves to its new rank.
	tb.Track("c", Entry{Rank: rk(3, 1), Origin: "r2"})
	if e, ok := tb.Lookup("c"); !ok || e.Rank != rk(3, 1) || tb.Len() != 2 {
		t.Fatalf("re-tracked id: %+v %v, %d tracked", e, ok, tb.Len())
	}
	if e, ok := tb.Untrack("a"); !ok || e.Origin != "r1" || tb.Len() != 1 {
		t.Fatalf("untrack: %+v %v", e, ok)
	}
	if _, ok := tb.Untrack("missing"); ok {
		t.Fatal("untracked an unknown id")
	}
}

func TestTableDrops(t *testing.T) {
	tb := New()
	tb.Track("x2", Entry{Rank: rk(1, 0), Origin: "dead"})
	tb.Track("x1", Entry{Rank: rk(2, 0), Origin: "dead"})
	tb.Track("y", Entry{Rank: rk(2, 0), Origin: "alive"})
	if got := tb.DropOrigin("dead"); !reflect.DeepEqual(got, []string{"x1", "x2"}) {
		t.Fatalf("dropped %v", got)
	}
	if _, ok := tb.Lookup("y"); tb.Len() != 1 || !ok {
		t.Fatal("DropOrigin dropped another origin's request")
	}
	tb.Track("z", Entry{Rank: rk(7, 1), Origin: "alive"})
	got := tb.DropUnregistered(func(w kv.WorkerWithDpRank) bool { return w.WorkerID != 7 })
	if !reflect.DeepEqual(got, []string{"z"}) || tb.Len() != 1 {
		t.Fatalf("DropUnregistered dropped %v, %d left", got, tb.Len())
	}
}

func TestApplyRemote(t *testing.T) {
	registered := func(w kv.WorkerWithDpRank) bool { return w.WorkerID != 9 }
	type step struct {
		c        Change
		wantRank kv.WorkerWithDpRank
		want     Outcome
		wantLen  int
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"add prefill free", []step{
			{Change{Origin: "p", Step: StepAdd, RequestID: "a", Rank: rk(1, 2), Stride: 1}, rk(1, 2), Apply, 1},
			{Change{Origin: "p", Step: StepPrefillCompleted, RequestID: "a"}, rk(1, 2), Apply, 1},
			{Change{Origin: "p", Step: StepFree, RequestID: "a"}, rk(1, 2), Apply, 0},
			{Change{Origin: "p", Step: StepFree, RequestID: "a"}, kv.WorkerWithDpRank{}, NotTracked, 0},
		}},
		{"own echo is ignored", []step{
			{Change{Origin: "me", Step: StepAdd, RequestID: "a", Rank: rk(1, 0)}, kv.WorkerWithDpRank{}, OwnEcho, 0},
		}},
		{"unknown worker", []step{
			{Change{Origin: "p", Step: StepAdd, RequestID: "a", Rank: rk(9, 0)}, rk(9, 0), UnknownWorker, 0},
		}},
		{"stride 0 means 1", []step{
			{Change{Origin: "p", Step: StepAdd, RequestID: "a", Rank: rk(1, 0), Stride: 0}, rk(1, 0), Apply, 1},
		}},
		{"stride mismatch", []step{
			{Change{Origin: "p", Step: StepAdd, RequestID: "a", Rank: rk(1, 0), Stride: 8}, rk(1, 0), StrideMismatch, 0},
		}},
		{"prefill of an unknown request", []step{
			{Change{Origin: "p", Step: StepPrefillCompleted, RequestID: "zz"}, kv.WorkerWithDpRank{}, NotTracked, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := New()
			for i, s := range tt.steps {
				w, out := tb.ApplyRemote(s.c, "me", 1, registered)
				if w != s.wantRank || out != s.want || tb.Len() != s.wantLen {
					t.Fatalf("step %d: got %v/%v len %d, want %v/%v len %d", i, w, out, tb.Len(), s.wantRank, s.want, s.wantLen)
				}
			}
		})
	}
}

// Client counts follow every way an entry comes and goes, and a client
// with nothing left is forgotten.
func TestClientCounts(t *testing.T) {
	tb := New()
	a, b := kv.WorkerWithDpRank{WorkerID: 1}, kv.WorkerWithDpRank{WorkerID: 2}
	tb.Track("r1", Entry{Rank: a, Client: "x"})
	tb.Track("r2", Entry{Rank: b, Client: "x"})
	tb.Track("r3", Entry{Rank: a, Client: "y"})
	tb.Track("r4", Entry{Rank: a, Origin: "peer"}) // unnamed
	if got := tb.ClientActive("x"); got != 2 {
		t.Fatalf("x holds %d, want 2", got)
	}
	if c, n := tb.TopClient(); c != "x" || n != 2 || tb.Clients() != 2 {
		t.Fatalf("top %q %d of %d clients, want x 2 of 2", c, n, tb.Clients())
	}
	tb.Track("r2", Entry{Rank: b, Client: "y"}) // a re-used id moves to its new client
	if tb.ClientActive("x") != 1 || tb.ClientActive("y") != 2 {
		t.Fatalf("after re-use: x %d, y %d; want 1, 2", tb.ClientActive("x"), tb.ClientActive("y"))
	}
	tb.Untrack("r1")
	tb.Untrack("r1") // twice changes nothing
	tb.DropUnregistered(func(w kv.WorkerWithDpRank) bool { return w != b })
	if tb.Clients() != 1 || tb.ClientActive("x") != 0 || tb.ClientActive("y") != 1 {
		t.Fatalf("after untrack and drop: %d clients, x %d, y %d; want 1, 0, 1", tb.Clients(), tb.ClientActive("x"), tb.ClientActive("y"))
	}
	tb.DropOrigin("")
	if c, n := tb.TopClient(); c != "" || n != 0 || tb.Clients() != 0 {
		t.Fatalf("empty table: top %q %d, %d clients", c, n, tb.Clients())
	}
}
