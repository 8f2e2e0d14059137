package sequence

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

func TestSample(t *testing.T) {
	h := hashes(10, 11, 12, 13, 14, 15, 16, 17, 18, 19)
	tests := []struct {
		stride int
		want   []kv.SequenceHash
	}{
		{0, h},
		{1, h},
		{4, hashes(13, 17)},
		{5, hashes(14, 19)},
		{10, hashes(19)},
		{11, hashes()},
	}
	for _, tt := range tests {
		if got := Sample(h, tt.stride); !slices.Equal(got, tt.want) {
			t.Errorf("Sample(stride %d) = %v, want %v", tt.stride, got, tt.want)
		}
	}
}

// chain builds n chained hashes whose first shared blocks equal base's.
func chain(base []kv.SequenceHash, shared, n int, salt uint64) []kv.SequenceHash {
	out := slices.Clone(base[:shared])
	for i := shared; i < n; i++ {
		out = append(out, kv.SequenceHash(salt<<32|uint64(i)))
	}
	return out
}

func TestStrideCountsBlocksInGroups(t *testing.T) {
	s := New(Config{AssumeKVReuse: true, Stride: 4})
	a := chain(nil, 0, 10, 1)
	b := chain(a, 8, 9, 2) // shares a's first two groups, one block of its own
	mustAdd(t, s, Request{ID: "a", SequenceHashes: Sample(a, 4), PromptBlocks: 10})
	if got := s.Load().ActiveBlocks; got != 10 {
		t.Fatalf("a alone: %v active blocks, want 10 (8 in sampled groups + 2 trailing)", got)
	}
	mustAdd(t, s, Request{ID: "b", SequenceHashes: Sample(b, 4), PromptBlocks: 9})
	if got := s.Load().ActiveBlocks; got != 11 {
		t.Fatalf("a and b: %v active blocks, want 11 (exact union)", got)
	}
	// A probe sharing 6 blocks with a matches one whole group: the stride
	// rounds the shared prefix down to 4, so 12-4 blocks are new.
	probe := chain(a, 6, 12, 3)
	if got := s.NewBlocks(Sample(probe, 4), 12); got != 8 {
		t.Fatalf("probe: %d new blocks, want 8", got)
	}
	if got := s.NewBlocks(Sample(a, 4), 10); got != 2 {
		t.Fatalf("a again: %d new blocks, want its 2 trailing blocks", got)
	}
	if err := s.Free("a"); err != nil {
		t.Fatal(err)
	}
	if got := s.Load().ActiveBlocks; got != 9 {
		t.Fatalf("b alone: %v active blocks, want 9", got)
	}
	info := s.Requests()[0]
	if info.PromptBlocks != 9 || len(info.SequenceHashes) != 2 {
		t.Fatalf("snapshot of b: %+v", info)
	}
	r := New(Config{AssumeKVReuse: true, Stride: 4})
	if err := r.Restore(info); err != nil {
		t.Fatal(err)
	}
	if r.Load() != s.Load() {
		t.Fatalf("restored load %+v, want %+v", r.Load(), s.Load())
	}
}

// TestStrideStaysCloseToExact adds random prompts that share prefixes of
// random length and checks the strided count against the exact one: each
// request can be off by less than a stride (its partly shared group), and
// freeing everything returns to zero.
func TestStrideStaysCloseToExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, stride := range []int{1, 2, 4, 16} {
		exact := New(Config{AssumeKVReuse: true, Stride: 1})
		strided := New(Config{AssumeKVReuse: true, Stride: stride})
		roots := [][]kv.SequenceHash{chain(nil, 0, 128, 1), chain(nil, 0, 128, 2)}
		var ids []string
		for i := range 200 {
			root := roots[rng.IntN(len(roots))]
			n := 1 + rng.IntN(128)
			h := chain(root, rng.IntN(n+1), n, uint64(10+i))
			id := string(rune('A'+i%26)) + string(rune('0'+i/26))
			mustAdd(t, exact, Request{ID: id, SequenceHashes: h})
			mustAdd(t, strided, Request{ID: id, SequenceHashes: Sample(h, stride), PromptBlocks: uint64(n)})
			ids = append(ids, id)
			e, s := exact.Load().ActiveBlocks, strided.Load().ActiveBlocks
			if s < e || s > e+float64(len(ids)*(stride-1)) {
				t.Fatalf("stride %d after %d adds: %v blocks, exact %v", stride, len(ids), s, e)
			}
			if stride == 1 && s != e {
				t.Fatalf("stride 1 differs from exact: %v vs %v", s, e)
			}
		}
		for _, id := range ids {
			if err := strided.Free(id); err != nil {
				t.Fatal(err)
			}
		}
		if l := strided.Load(); l.ActiveBlocks != 0 || l.ActiveRequests != 0 {
			t.Fatalf("stride %d: load %+v after freeing everything", stride, l)
		}
	}
}

func TestStrideValidated(t *testing.T) {
	for _, s := range []int{-1, MaxStride + 1} {
		c := DefaultConfig()
		c.Stride = s
		if c.Validate() == nil {
			t.Errorf("stride %d accepted", s)
		}
	}
}

func TestSweepInterval(t *testing.T) {
	c := DefaultConfig()
	if got := c.SweepInterval(30 * time.Second); got != 30*time.Second {
		t.Fatalf("default expiry sweeps every %v, want 30s", got)
	}
	c.ExpiryDuration = 20 * time.Second
	if got := c.SweepInterval(30 * time.Second); got != 5*time.Second {
		t.Fatalf("20s expiry sweeps every %v, want 5s", got)
	}
}
