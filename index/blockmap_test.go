package index

import (
	"math/rand/v2"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// TestBlockMapMatchesAGoMap runs random puts, overwrites and deletes over
// small key spaces (long probe runs, wrap-around at the table's end,
// deletes in the middle of runs) and compares every key with a Go map
// (hashtab's own tests check its probe runs).
func TestBlockMapMatchesAGoMap(t *testing.T) {
	for _, keys := range []int{3, 40, 1000} {
		rng := rand.New(rand.NewPCG(uint64(keys), 9))
		var m blockMap
		ref := map[kv.ExternalBlockHash]nodeRef{}
		for range 20000 {
			k := kv.ExternalBlockHash(rng.IntN(keys))
			if rng.IntN(100) < 55 {
				n := nodeRef(1 + rng.IntN(8))
				m.put(k, n)
				ref[k] = n
			} else {
				m.del(k)
				delete(ref, k)
			}
		}
		if m.len() != len(ref) {
			t.Fatalf("%d keys: map holds %d, reference %d", keys, m.len(), len(ref))
		}
		for k := range kv.ExternalBlockHash(keys) {
			if got := m.get(k); got != ref[k] {
				t.Fatalf("%d keys: key %d maps to %d, want %d", keys, k, got, ref[k])
			}
		}
		if got := len(m.nodes(nil)); got != len(ref) {
			t.Fatalf("nodes lists %d, want %d", got, len(ref))
		}
	}
}

func TestBlockMapEmptyAndExtremeKeys(t *testing.T) {
	var m blockMap
	if m.get(0) != 0 || m.touch(7) != 0 || m.len() != 0 {
		t.Fatal("an empty map must answer nothing")
	}
	m.del(5) // deleting from an empty map is a no-op
	const a, b nodeRef = 3, 9
	m.put(0, a) // zero is a key like any other
	m.put(^kv.ExternalBlockHash(0), b)
	if m.get(0) != a || m.get(^kv.ExternalBlockHash(0)) != b || m.len() != 2 {
		t.Fatal("zero and max keys must be stored")
	}
	m.del(0)
	if m.get(0) != 0 || m.get(^kv.ExternalBlockHash(0)) != b || m.len() != 1 {
		t.Fatal("delete removed the wrong key")
	}
}

func BenchmarkBlockMapChurn(b *testing.B) {
	const live = 4096
	var m blockMap
	const n nodeRef = 1
	for k := range kv.ExternalBlockHash(live) {
		m.put(k, n)
	}
	k := kv.ExternalBlockHash(live)
	for b.Loop() {
		m.put(k, n)
		m.del(k - live)
		k++
	}
}

// Chains longer than checkSelfReference's quadratic scan go through its
// set; a repeat is caught there, and the set starts empty for the next
// event (a leftover name would reject a valid chain).
func TestLongChainRepeatUsesTheSetAndResets(t *testing.T) {
	tr := NewTree()
	w := rank(1, 0)
	long := make([]kv.StoredBlock, 100)
	for i := range long {
		long[i] = blk(uint64(5000+i), uint64(i+1))
	}
	bad := append(append([]kv.StoredBlock{}, long...), blk(5000, 999))
	if err := tr.Apply(storedRoot(w, bad...)); err == nil {
		t.Fatal("a 101-block chain repeating its first name was accepted")
	}
	if tr.Len() != 0 {
		t.Fatalf("the rejected chain left %d entries", tr.Len())
	}
	if err := tr.Apply(storedRoot(w, long...)); err != nil {
		t.Fatalf("a valid chain after the rejected one: %v", err)
	}
	if tr.Len() != len(long) {
		t.Fatalf("index holds %d entries, want %d", tr.Len(), len(long))
	}
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
