package registry

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

func rk(w uint64, dp uint32) kv.WorkerWithDpRank {
	return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(w), DpRank: dp}
}

func TestUpsertReportsRankChanges(t *testing.T) {
	t0 := time.Unix(100, 0)
	tests := []struct {
		name        string
		first, then Shape
		wantAdded   []kv.WorkerWithDpRank
		wantRemoved []kv.WorkerWithDpRank
	}{
		{"refresh keeps ranks", Shape{DpSize: 2}, Shape{DpSize: 2, MaxNumBatchedTokens: 4096}, nil, nil},
		{"size 0 is size 1", Shape{DpSize: 0}, Shape{DpSize: 1}, nil, nil},
		{"more ranks", Shape{DpSize: 1}, Shape{DpSize: 2},
			[]kv.WorkerWithDpRank{rk(5, 0), rk(5, 1)}, []kv.WorkerWithDpRank{rk(5, 0)}},
		{"moved start", Shape{DpStart: 0, DpSize: 2}, Shape{DpStart: 2, DpSize: 2},
			[]kv.WorkerWithDpRank{rk(5, 2), rk(5, 3)}, []kv.WorkerWithDpRank{rk(5, 0), rk(5, 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New[string](8192, Limits{})
			if ch, _ := r.Upsert(5, tt.first, "hb1", false, t0); len(ch.Added) != int(max(tt.first.DpSize, 1)) || len(ch.Removed) != 0 {
				t.Fatalf("first upsert %+v", ch)
			}
			ch, err := r.Upsert(5, tt.then, "hb2", false, t0.Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ch.Added, tt.wantAdded) || !reflect.DeepEqual(ch.Removed, tt.wantRemoved) {
				t.Fatalf("change %+v, want added %v removed %v", ch, tt.wantAdded, tt.wantRemoved)
			}
			w := r.Workers()[0]
			if w.Info != "hb2" || !w.LastSeen.Equal(t0.Add(time.Second)) || w.Shape != tt.then {
				t.Fatalf("worker not refreshed: %+v", w)
			}
		})
	}
}

func TestRanksSortedAndBudgets(t *testing.T) {
	r := New[int](8192, Limits{})
	mustUpsert(t, r, 3, Shape{DpSize: 2}, 0, true, time.Time{})
	mustUpsert(t, r, 1, Shape{DpStart: 4, DpSize: 1, MaxNumBatchedTokens: 2048}, 0, true, time.Time{})
	want := []kv.WorkerWithDpRank{rk(1, 4), rk(3, 0), rk(3, 1)}
	if !reflect.DeepEqual(r.Ranks(), want) {
		t.Fatalf("ranks %v, want %v", r.Ranks(), want)
	}
	if r.Budget(1) != 2048 || r.Budget(3) != 8192 || r.Budget(9) != 0 {
		t.Fatalf("budgets %d %d %d", r.Budget(1), r.Budget(3), r.Budget(9))
	}
	if !r.Has(rk(1, 4)) || r.Has(rk(1, 0)) || r.Has(rk(3, 2)) || r.Has(rk(9, 0)) {
		t.Fatal("Has disagrees with the shapes")
	}
	ch, ok := r.Remove(3)
	if !ok || !reflect.DeepEqual(ch.Removed, []kv.WorkerWithDpRank{rk(3, 0), rk(3, 1)}) {
		t.Fatalf("remove: %v %+v", ok, ch)
	}
	if _, ok := r.Remove(3); ok {
		t.Fatal("removed twice")
	}
	if !reflect.DeepEqual(r.Ranks(), []kv.WorkerWithDpRank{rk(1, 4)}) {
		t.Fatalf("ranks after remove %v", r.Ranks())
	}
}

func TestExpired(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := New[int](0, Limits{})
	mustUpsert(t, r, 1, Shape{}, 0, false, t0)
	mustUpsert(t, r, 2, Shape{}, 0, true, t0)                     // static: never expires
	mustUpsert(t, r, 3, Shape{}, 0, false, t0.Add(8*time.Second)) // heard recently
	mustUpsert(t, r, 4, Shape{}, 0, false, t0)
	mustUpsert(t, r, 4, Shape{}, 0, true, t0) // a static registration sticks
	if got := r.Expired(t0.Add(11*time.Second), 10*time.Second); !reflect.DeepEqual(got, []kv.WorkerID{1}) {
		t.Fatalf("expired %v, want [1]", got)
	}
	if got := r.Expired(t0.Add(time.Hour), 0); got != nil {
		t.Fatalf("timeout 0 expired %v", got)
	}
}

func mustUpsert[H any](t *testing.T, r *Registry[H], id kv.WorkerID, shape Shape, info H, static bool, seen time.Time) {
	t.Helper()
	if _, err := r.Upsert(id, shape, info, static, seen); err != nil {
		t.Fatal(err)
	}
}

func TestLimits(t *testing.T) {
	r := New[int](0, Limits{MaxWorkers: 2, MaxRanks: 4})
	mustUpsert(t, r, 1, Shape{DpSize: 2}, 0, true, time.Time{})
	mustUpsert(t, r, 2, Shape{DpSize: 1}, 0, true, time.Time{})
	if _, err := r.Upsert(3, Shape{}, 0, true, time.Time{}); !errors.Is(err, ErrFull) {
		t.Fatalf("third worker: %v", err)
	}
	// A reshape may grow up to the rank limit, not past it; a refused one
	// keeps the old shape.
	mustUpsert(t, r, 2, Shape{DpSize: 2}, 0, true, time.Time{})
	if _, err := r.Upsert(2, Shape{DpSize: 3}, 0, true, time.Time{}); !errors.Is(err, ErrFull) {
		t.Fatalf("reshape past the rank limit: %v", err)
	}
	if len(r.Ranks()) != 4 || r.Workers()[1].Shape.DpSize != 2 {
		t.Fatalf("refused reshape changed the registry: %v", r.Ranks())
	}
	// Refreshes of known workers are never refused.
	mustUpsert(t, r, 1, Shape{DpSize: 2, MaxNumBatchedTokens: 99}, 0, false, time.Time{})
	// Room again after a removal.
	r.Remove(1)
	mustUpsert(t, r, 3, Shape{DpSize: 2}, 0, true, time.Time{})
}

func TestConditionsState(t *testing.T) {
	tests := []struct {
		name string
		c    Conditions
		rank uint32
		want kv.WorkerState
	}{
		{"none", Conditions{}, 0, kv.WorkerActive},
		{"busy rank", Conditions{BusyRanks: []uint32{1}}, 1, kv.WorkerBusy},
		{"another rank busy", Conditions{BusyRanks: []uint32{1}}, 0, kv.WorkerActive},
		{"unhealthy beats busy", Conditions{Unhealthy: true, BusyRanks: []uint32{0}}, 0, kv.WorkerUnhealthy},
		{"draining beats all", Conditions{Draining: true, Unhealthy: true, BusyRanks: []uint32{0}}, 0, kv.WorkerDraining},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.State(tt.rank); got != tt.want {
				t.Fatalf("State(%d) = %v, want %v", tt.rank, got, tt.want)
			}
		})
	}
}

func TestSetConditions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := New[int](0, Limits{})
	mustUpsert(t, r, 1, Shape{DpStart: 2, DpSize: 2}, 0, true, t0)
	steps := []struct {
		name        string
		do          func() (bool, bool)
		wantChanged bool
		wantStates  [2]kv.WorkerState // ranks 2 and 3
	}{
		{"busy one rank", func() (bool, bool) { return r.SetBusy(1, true, []uint32{3, 3, 9}) }, true,
			[2]kv.WorkerState{kv.WorkerActive, kv.WorkerBusy}},
		{"same busy set", func() (bool, bool) { return r.SetBusy(1, true, []uint32{3}) }, false,
			[2]kv.WorkerState{kv.WorkerActive, kv.WorkerBusy}},
		{"busy every rank", func() (bool, bool) { return r.SetBusy(1, true, nil) }, true,
			[2]kv.WorkerState{kv.WorkerBusy, kv.WorkerBusy}},
		{"unhealthy", func() (bool, bool) { return r.SetUnhealthy(1, true) }, true,
			[2]kv.WorkerState{kv.WorkerUnhealthy, kv.WorkerUnhealthy}},
		{"unhealthy again", func() (bool, bool) { return r.SetUnhealthy(1, true) }, false,
			[2]kv.WorkerState{kv.WorkerUnhealthy, kv.WorkerUnhealthy}},
		{"draining", func() (bool, bool) { return r.SetDraining(1, true, t0.Add(time.Second)) }, true,
			[2]kv.WorkerState{kv.WorkerDraining, kv.WorkerDraining}},
		{"draining again keeps the start", func() (bool, bool) { return r.SetDraining(1, true, t0.Add(time.Hour)) }, false,
			[2]kv.WorkerState{kv.WorkerDraining, kv.WorkerDraining}},
		{"undrain", func() (bool, bool) { return r.SetDraining(1, false, t0) }, true,
			[2]kv.WorkerState{kv.WorkerUnhealthy, kv.WorkerUnhealthy}},
		{"healthy", func() (bool, bool) { return r.SetUnhealthy(1, false) }, true,
			[2]kv.WorkerState{kv.WorkerBusy, kv.WorkerBusy}},
		{"not busy", func() (bool, bool) { return r.SetBusy(1, false, []uint32{2}) }, true,
			[2]kv.WorkerState{kv.WorkerActive, kv.WorkerActive}},
	}
	for _, st := range steps {
		changed, known := st.do()
		if !known || changed != st.wantChanged {
			t.Fatalf("%s: changed %v known %v, want changed %v", st.name, changed, known, st.wantChanged)
		}
		got := [2]kv.WorkerState{r.State(rk(1, 2)), r.State(rk(1, 3))}
		if got != st.wantStates {
			t.Fatalf("%s: states %v, want %v", st.name, got, st.wantStates)
		}
	}
	for _, set := range []func() (bool, bool){
		func() (bool, bool) { return r.SetBusy(9, true, nil) },
		func() (bool, bool) { return r.SetUnhealthy(9, true) },
		func() (bool, bool) { return r.SetDraining(9, true, t0) },
	} {
		if changed, known := set(); changed || known {
			t.Fatal("a condition of an unknown worker was set")
		}
	}
	if r.State(rk(9, 0)) != kv.WorkerActive {
		t.Fatal("unknown rank not active")
	}
}

func TestConditionsSurviveRefreshAndReshape(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := New[int](0, Limits{})
	mustUpsert(t, r, 1, Shape{DpSize: 2}, 0, true, t0)
	r.SetBusy(1, true, []uint32{0, 1})
	r.SetDraining(1, true, t0)
	r.SetUnhealthy(1, true)
	mustUpsert(t, r, 1, Shape{DpSize: 2}, 7, false, t0.Add(time.Second)) // refresh
	mustUpsert(t, r, 1, Shape{DpSize: 1}, 8, false, t0.Add(time.Second)) // reshape
	w := r.Workers()[0]
	if !w.Static || !w.Draining || !w.DrainingSince.Equal(t0) || !w.Unhealthy || !reflect.DeepEqual(w.BusyRanks, []uint32{0}) {
		t.Fatalf("conditions after refresh and reshape: %+v", w)
	}
}

func TestDrainExpired(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := New[int](0, Limits{})
	for id := kv.WorkerID(1); id <= 3; id++ {
		mustUpsert(t, r, id, Shape{}, 0, true, t0)
	}
	r.SetDraining(3, true, t0)
	r.SetDraining(1, true, t0.Add(5*time.Second))
	if got := r.DrainExpired(t0.Add(4*time.Second), 4*time.Second); !reflect.DeepEqual(got, []kv.WorkerID{3}) {
		t.Fatalf("expired %v, want [3]", got)
	}
	if got := r.DrainExpired(t0.Add(9*time.Second), 4*time.Second); !reflect.DeepEqual(got, []kv.WorkerID{1, 3}) {
		t.Fatalf("expired %v, want [1 3]", got)
	}
	if got := r.DrainExpired(t0.Add(5*time.Second), 0); !reflect.DeepEqual(got, []kv.WorkerID{1, 3}) {
		t.Fatalf("grace 0: expired %v, want [1 3]", got)
	}
}

func TestDigest(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a, b := New[int](0, Limits{}), New[string](0, Limits{})
	if a.Digest() != 0 {
		t.Fatal("empty registry digest is not 0")
	}
	mustUpsert(t, a, 1, Shape{DpSize: 2}, 0, true, t0)
	mustUpsert(t, a, 2, Shape{}, 0, false, t0)
	mustUpsert(t, b, 2, Shape{}, "x", true, t0.Add(time.Hour)) // other order, info, time
	mustUpsert(t, b, 1, Shape{DpSize: 2}, "y", false, t0)
	if a.Digest() != b.Digest() {
		t.Fatal("same workers, different digests")
	}
	b.SetUnhealthy(1, true) // each replica's own verdict: not in the digest
	b.SetBusy(2, true, nil)
	if a.Digest() != b.Digest() {
		t.Fatal("health and busy changed the digest")
	}
	for _, c := range []struct {
		name   string
		change func()
	}{
		{"drain", func() { b.SetDraining(2, true, t0) }},
		{"reshape", func() { mustUpsert(t, b, 1, Shape{DpSize: 3}, "y", false, t0) }},
		{"remove", func() { b.Remove(2) }},
	} {
		before := b.Digest()
		c.change()
		if b.Digest() == before {
			t.Fatalf("%s did not change the digest", c.name)
		}
	}
}

// The rank list is kept sorted by edits, not re-sorted: after any mix of
// registrations, reshapes and removals it must equal the ranks of the
// registered workers sorted from scratch.
func TestRanksFollowEveryChange(t *testing.T) {
	r := New[string](8192, Limits{})
	rng := rand.New(rand.NewPCG(5, 6))
	now := time.Unix(0, 0)
	for step := range 5000 {
		id := kv.WorkerID(1 + rng.IntN(300))
		if rng.IntN(4) == 0 {
			r.Remove(id)
		} else {
			shape := Shape{DpStart: uint32(rng.IntN(3)), DpSize: uint32(1 + rng.IntN(4))}
			if _, err := r.Upsert(id, shape, "", false, now); err != nil {
				t.Fatal(err)
			}
		}
		var want []kv.WorkerWithDpRank
		for wid, w := range r.workers {
			want = append(want, w.Shape.Ranks(wid)...)
		}
		slices.SortFunc(want, kv.CompareRanks)
		if !slices.Equal(r.Ranks(), want) {
			t.Fatalf("step %d: ranks %v, want %v", step, r.Ranks(), want)
		}
	}
}
