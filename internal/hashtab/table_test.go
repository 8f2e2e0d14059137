package hashtab

import (
	"math/rand/v2"
	"testing"
)

type ref struct {
	refs   int32
	weight float64
}

// checkProbeRuns verifies linear probing's invariant: no free slot lies
// between a key's home slot and the slot holding it (a lookup would stop
// there and miss the key), and the count matches the occupied slots.
func checkProbeRuns[K ~uint64, V any](t *testing.T, tab *Table[K, V]) {
	t.Helper()
	mask := len(tab.slots) - 1
	used := 0
	for j, s := range tab.slots {
		if s.key == 0 {
			continue
		}
		used++
		for i := tab.home(s.key); i != j; i = (i + 1) & mask {
			if tab.slots[i].key == 0 {
				t.Fatalf("key %d in slot %d: free slot %d on its probe run", s.key, j, i)
			}
		}
	}
	if used != tab.used {
		t.Fatalf("%d slots used, count says %d", used, tab.used)
	}
}

// The table agrees with a Go map through random upserts, updates, puts
// and deletes, over sequential keys (the worst case for a weak slot
// choice), keys differing in high bits only, random keys and the zero
// key, while it grows and shrinks.
func TestTableMatchesAMap(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var tab Table[uint64, ref]
		want := map[uint64]ref{}
		key := func() uint64 {
			switch rng.IntN(3) {
			case 0:
				return uint64(rng.IntN(300)) // sequential, includes 0
			case 1:
				return uint64(rng.IntN(40)) << 40
			default:
				return rng.Uint64()
			}
		}
		var keys []uint64
		for step := range 20000 {
			// Phases of mostly inserts and mostly deletes make the table
			// grow and shrink several times.
			insertBias := 6
			if (step/2500)%2 == 1 {
				insertBias = 2
			}
			switch op := rng.IntN(10); {
			case op < insertBias-1:
				k := key()
				keys = append(keys, k)
				v, added := tab.Upsert(k)
				if _, had := want[k]; had == added {
					t.Fatalf("seed %d step %d: Upsert(%d) added=%v, the map had it: %v", seed, step, k, added, had)
				}
				v.refs++
				v.weight = float64(step)
				want[k] = *v
			case op < insertBias:
				k := key()
				keys = append(keys, k)
				v := ref{refs: -1, weight: float64(-step)}
				tab.Put(k, v)
				want[k] = v
			case len(keys) > 0:
				k := keys[rng.IntN(len(keys))]
				tab.Delete(k)
				delete(want, k)
			}
			if tab.Len() != len(want) {
				t.Fatalf("seed %d step %d: Len %d, the map has %d", seed, step, tab.Len(), len(want))
			}
			if step%97 == 0 {
				checkProbeRuns(t, &tab)
			}
		}
		checkProbeRuns(t, &tab)
		for k, w := range want {
			if got := tab.Get(k); got == nil || *got != w {
				t.Fatalf("seed %d: Get(%d) = %v, want %v", seed, k, got, w)
			}
		}
		seen := 0
		tab.Each(func(k uint64, v *ref) {
			seen++
			if w, ok := want[k]; !ok || *v != w {
				t.Fatalf("seed %d: Each gave %d=%v, the map has %v (%v)", seed, k, *v, w, ok)
			}
		})
		if seen != len(want) {
			t.Fatalf("seed %d: Each visited %d keys, want %d", seed, seen, len(want))
		}
		for range 1000 {
			k := rng.Uint64()
			if _, ok := want[k]; !ok && tab.Get(k) != nil {
				t.Fatalf("seed %d: Get(%d) found a key never inserted", seed, k)
			}
		}
	}
}

// A table that fills with a few dozen keys and empties again resizes only
// on the first fill: later cycles reuse its slots.
func TestFillAndEmptyCyclesKeepTheirSlots(t *testing.T) {
	for _, keys := range []uint64{32, 100, 3 * shrinkFloor / 4} {
		var tab Table[uint64, int]
		var first *slot[uint64, int]
		for cycle := range uint64(5) {
			for k := range keys {
				tab.Put(cycle<<32|k+1, 1)
			}
			if cycle == 0 {
				first = &tab.slots[0]
			}
			for k := range keys {
				tab.Delete(cycle<<32 | k + 1)
			}
			if tab.Len() != 0 || &tab.slots[0] != first {
				t.Fatalf("%d keys, cycle %d: %d keys left, slots reallocated: %v", keys, cycle, tab.Len(), &tab.slots[0] != first)
			}
		}
	}
}

// A table emptied after a burst gives its slots back, down to the
// floor; Reset empties it and keeps a small table.
func TestTableShrinksAndResets(t *testing.T) {
	var tab Table[uint64, int]
	for k := uint64(1); k <= 10000; k++ {
		tab.Put(k, int(k))
	}
	grown := len(tab.slots)
	for k := uint64(1); k <= 10000; k++ {
		tab.Delete(k)
	}
	if tab.Len() != 0 || len(tab.slots) != shrinkFloor || grown < 10000 {
		t.Fatalf("after 10,000 puts (%d slots) and their deletes: %d keys in %d slots", grown, tab.Len(), len(tab.slots))
	}
	for k := uint64(0); k < 100; k++ {
		tab.Put(k, 1)
	}
	tab.Reset()
	if tab.Len() != 0 || tab.Get(0) != nil || tab.Get(5) != nil || tab.Touch(5) != 0 {
		t.Fatalf("after Reset: Len %d, Get(0) %v, Get(5) %v", tab.Len(), tab.Get(0), tab.Get(5))
	}
	tab.Put(5, 7)
	if v := tab.Get(5); v == nil || *v != 7 {
		t.Fatalf("after Reset and Put(5, 7): Get(5) = %v", v)
	}
}

// Touch reads the key's home slot: for a stored key alone in its run it
// returns the key itself.
func TestTouchReadsTheHomeSlot(t *testing.T) {
	var tab Table[uint64, int]
	if tab.Touch(42) != 0 {
		t.Fatal("Touch on an empty table read something")
	}
	tab.Put(42, 1)
	if got := tab.Touch(42); got != 42 {
		t.Fatalf("Touch(42) = %d, want 42", got)
	}
}

// Two tables draw different seeds, so a key set that collides in one does
// not collide in another (a sender cannot pick its keys to overload every
// replica's table the same way).
func TestSeedsDiffer(t *testing.T) {
	var a, b Table[uint64, int]
	a.Put(1, 1)
	b.Put(1, 1)
	if a.seed == b.seed {
		t.Fatalf("two tables share seed %x", a.seed)
	}
}

func BenchmarkUpsertDelete(b *testing.B) {
	const live = 64
	var tab Table[uint64, ref]
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]uint64, 1<<12)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	i := 0
	for b.Loop() {
		v, _ := tab.Upsert(keys[i&(len(keys)-1)])
		v.refs++
		tab.Delete(keys[(i-live)&(len(keys)-1)])
		i++
	}
}
