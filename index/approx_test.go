package index

import (
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

var t0 = time.Unix(1_700_000_000, 0)

func record(t *testing.T, a *Approx, r kv.WorkerWithDpRank, at time.Time, hs ...uint64) {
	t.Helper()
	if err := a.RecordDecision(r, locals(hs...), at); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func deviceScores(a *Approx, hs ...uint64) map[kv.WorkerWithDpRank]uint32 {
	out := map[kv.WorkerWithDpRank]uint32{}
	for r, m := range a.FindMatches(locals(hs...)) {
		out[r] = m.Device
	}
	return out
}

func TestApproxTTL(t *testing.T) {
	a := NewApprox(ApproxConfig{})
	record(t, a, w1, t0, 1, 2, 3)
	record(t, a, w2, t0.Add(60*time.Second), 1, 2)
	if got := deviceScores(a, 1, 2, 3); !maps.Equal(got, map[kv.WorkerWithDpRank]uint32{w1: 3, w2: 2}) {
		t.Fatalf("scores %v", got)
	}
	if n := a.Expire(t0.Add(119 * time.Second)); n != 0 {
		t.Fatalf("expired %d before the ttl", n)
	}
	// w1's blocks expire at the default TTL; w2's are a minute younger.
	if n := a.Expire(t0.Add(DefaultApproxTTL)); n != 3 {
		t.Fatalf("expired %d at the ttl, want 3", n)
	}
	if got := deviceScores(a, 1, 2, 3); !maps.Equal(got, map[kv.WorkerWithDpRank]uint32{w2: 2}) {
		t.Fatalf("scores after expiry %v", got)
	}
	a.Expire(t0.Add(time.Hour))
	if a.Len() != 0 || a.Counters().Expired != 5 {
		t.Fatalf("len %d counters %+v", a.Len(), a.Counters())
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestApproxRefreshExtendsOnlyReusedBlocks(t *testing.T) {
	a := NewApprox(ApproxConfig{TTL: 10 * time.Second})
	record(t, a, w1, t0, 1, 2, 3)
	record(t, a, w1, t0.Add(5*time.Second), 1, 2) // refreshes the prefix only
	a.Expire(t0.Add(12 * time.Second))
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if got := deviceScores(a, 1, 2, 3); got[w1] != 2 {
		t.Fatalf("scores %v, want the refreshed prefix of 2", got)
	}
	a.Expire(t0.Add(15 * time.Second))
	if a.Len() != 0 {
		t.Fatalf("len %d after the refreshed ttl", a.Len())
	}
}

func TestApproxPruneDeepestFirst(t *testing.T) {
	a := NewApprox(ApproxConfig{MaxTreeSize: 10, PruneTargetRatio: 0.5})
	record(t, a, w2, t0, 50, 51, 52)
	// One request of 12 blocks at a later time: the tree overflows, w2's
	// older blocks go first, then w1's deepest.
	record(t, a, w1, t0.Add(time.Second), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
	if a.Len() != 5 {
		t.Fatalf("len %d after pruning, want 5", a.Len())
	}
	if got := deviceScores(a, 1, 2, 3, 4, 5, 6, 7); !maps.Equal(got, map[kv.WorkerWithDpRank]uint32{w1: 5}) {
		t.Fatalf("scores %v, want the 5-block prefix", got)
	}
	if got := deviceScores(a, 50); len(got) != 0 {
		t.Fatalf("older blocks survived: %v", got)
	}
	if c := a.Counters(); c.Pruned != 10 {
		t.Fatalf("pruned %d, want 10", c.Pruned)
	}
}

// TestApproxSwarmStaysBounded routes 100k unique prompts with no expiry in
// sight: only the size bound keeps memory in check.
func TestApproxSwarmStaysBounded(t *testing.T) {
	const maxSize = 4096
	a := NewApprox(ApproxConfig{MaxTreeSize: maxSize, PruneTargetRatio: 0.8})
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := make([]kv.LocalBlockHash, 4)
	maxHeap := 0
	for i := range 100_000 {
		prompt[0] = kv.LocalBlockHash(rng.IntN(16)) // shared system prompts
		for j := 1; j < len(prompt); j++ {
			prompt[j] = kv.LocalBlockHash(rng.Uint64())
		}
		r := rank(kv.WorkerID(rng.IntN(8)), 0)
		if err := a.RecordDecision(r, prompt, t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if a.Len() > maxSize {
			t.Fatalf("prompt %d: tree size %d above the bound", i, a.Len())
		}
		maxHeap = max(maxHeap, a.HeapLen())
		if i%20_000 == 0 {
			if err := a.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if limit := 2*maxSize + 1024 + 4; maxHeap > limit {
		t.Fatalf("heap reached %d entries, bound %d", maxHeap, limit)
	}
	if a.Counters().Pruned == 0 {
		t.Fatal("nothing was pruned")
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	t.Logf("tree %d entries, heap peak %d, pruned %d", a.Len(), maxHeap, a.Counters().Pruned)
}

func TestApproxRemoveWorker(t *testing.T) {
	a := NewApprox(ApproxConfig{})
	record(t, a, w1, t0, 1, 2)
	record(t, a, w1r1, t0, 1, 2)
	record(t, a, w2, t0, 1)
	a.RemoveWorker(1)
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if got := a.WorkerBlockCounts(); !maps.Equal(got, map[kv.WorkerWithDpRank]uint64{w2: 1}) {
		t.Fatalf("counts %v", got)
	}
	// Stale heap entries of the removed worker must not touch a new rank
	// that reuses its id.
	record(t, a, w3, t0.Add(time.Minute), 1, 2)
	a.Expire(t0.Add(DefaultApproxTTL))
	if got := deviceScores(a, 1, 2); !maps.Equal(got, map[kv.WorkerWithDpRank]uint32{w3: 2}) {
		t.Fatalf("scores %v", got)
	}
	if err := a.RecordDecision(w1, nil, t0); err != nil || a.Digest() == 0 {
		t.Fatalf("empty decision: %v", err)
	}
}

func TestApproxConfig(t *testing.T) {
	tests := []struct {
		cfg     ApproxConfig
		wantErr bool
		applied ApproxConfig
	}{
		{ApproxConfig{}, false, ApproxConfig{DefaultApproxTTL, DefaultMaxTreeSize, DefaultPruneTargetRatio}},
		{ApproxConfig{TTL: time.Second, MaxTreeSize: 10, PruneTargetRatio: 0.5}, false, ApproxConfig{time.Second, 10, 0.5}},
		{ApproxConfig{TTL: -time.Second}, true, ApproxConfig{DefaultApproxTTL, DefaultMaxTreeSize, DefaultPruneTargetRatio}},
		{ApproxConfig{MaxTreeSize: -1}, true, ApproxConfig{DefaultApproxTTL, DefaultMaxTreeSize, DefaultPruneTargetRatio}},
		{ApproxConfig{PruneTargetRatio: 1.5}, true, ApproxConfig{DefaultApproxTTL, DefaultMaxTreeSize, DefaultPruneTargetRatio}},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("%+v: Validate() = %v", tt.cfg, err)
		}
		if got := NewApprox(tt.cfg).Config(); got != tt.applied {
			t.Errorf("%+v: applied %+v, want %+v", tt.cfg, got, tt.applied)
		}
	}
}
