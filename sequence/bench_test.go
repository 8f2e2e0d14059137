package sequence

import (
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// BenchmarkAddFree is a request's add and free on one rank.
func BenchmarkAddFree(b *testing.B) {
	// busy: a rank holding 256 requests of 64 sampled hashes, half of them
	// a shared prefix; each op adds one and frees the oldest, so the
	// table's size is steady.
	b.Run("busy", func(b *testing.B) { benchmarkAddFree(b, 256, 64, 32) })
	// idle: a rank with nothing in flight gets one request (a 4k-token
	// prompt at the default stride 8: 32 sampled hashes) and frees it, as
	// most ranks of a lightly loaded fleet do, and as a peer applies them.
	b.Run("idle", func(b *testing.B) { benchmarkAddFree(b, 0, 32, 0) })
}

func benchmarkAddFree(b *testing.B, active, blocks, shared int) {
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
	ring := max(active*2, 2)
	prompts := make([][]kv.SequenceHash, ring)
	ids := make([]string, ring)
	for i := range prompts {
		prompts[i] = prompt(i)
		ids[i] = fmt.Sprintf("req-%d", i)
	}
	for i := range active {
		if err := s.AddRequest(Request{ID: ids[i], SequenceHashes: prompts[i], ISL: uint64(16 * blocks), PrefillTokens: uint64(16 * blocks), TrackPrefill: true}, t0); err != nil {
			b.Fatal(err)
		}
	}
	i := active
	b.ReportAllocs()
	for b.Loop() {
		slot := i % ring
		if err := s.AddRequest(Request{ID: ids[slot], SequenceHashes: prompts[slot], ISL: uint64(16 * blocks), PrefillTokens: uint64(16 * blocks), TrackPrefill: true}, t0); err != nil {
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
