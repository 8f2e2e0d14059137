package sequence

import (
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// BenchmarkAddFree keeps 256 requests of 64 blocks active (each sharing a
// 32-block system prompt) and, per iteration, adds one and frees the oldest.
func BenchmarkAddFree(b *testing.B) {
	const (
		active = 256
		blocks = 64
		shared = 32
	)
	s := New(DefaultConfig())
	prompt := func(i int) []kv.SequenceHash {
		hs := make([]kv.SequenceHash, blocks)
		for j := range hs {
			if j < shared {
				hs[j] = kv.SequenceHash(j)
			} else {
				hs[j] = kv.SequenceHash(uint64(i+1)<<20 | uint64(j))
			}
		}
		return hs
	}
	const ring = active * 2
	prompts := make([][]kv.SequenceHash, ring)
	ids := make([]string, ring)
	for i := range prompts {
		prompts[i] = prompt(i)
		ids[i] = fmt.Sprintf("req-%d", i)
	}
	for i := range active {
		if err := s.AddRequest(Request{ID: ids[i], SequenceHashes: prompts[i], ISL: 16 * blocks, PrefillTokens: 16 * blocks, TrackPrefill: true}, t0); err != nil {
			b.Fatal(err)
		}
	}
	i := active
	b.ReportAllocs()
	for b.Loop() {
		slot := i % ring
		if err := s.AddRequest(Request{ID: ids[slot], SequenceHashes: prompts[slot], ISL: 16 * blocks, PrefillTokens: 16 * blocks, TrackPrefill: true}, t0); err != nil {
			b.Fatal(err)
		}
		if err := s.Free(ids[(i-active)%ring]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*blocks*2), "ns/block-op")
	if got := s.Load().ActiveRequests; got != active {
		b.Fatalf("active requests drifted to %d", got)
	}
}
