package scheduling

import (
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func benchCandidates(n int) []Candidate {
	cands := make([]Candidate, n)
	for i := range cands {
		cands[i] = Candidate{
			Worker:              kv.WorkerWithDpRank{WorkerID: kv.WorkerID(i / 4), DpRank: uint32(i % 4)},
			DeviceOverlap:       uint32(i % 17),
			HostOverlap:         uint32(i % 5),
			ActivePrefillTokens: uint64((i * 977) % 8192),
			ActiveBlocks:        float64((i * 131) % 2000),
			NewBlocks:           uint64(64 - i%17),
			ActiveRequests:      i % 32,
			HasLoad:             true,
		}
	}
	return cands
}

// BenchmarkSelect64 scores and selects among 64 ranks (a 4096-token prompt,
// block size 16) at temperature 0 and with softmax sampling.
func BenchmarkSelect64(b *testing.B) {
	cands := benchCandidates(64)
	for _, temp := range []float64{0, 0.5} {
		name := "argmin"
		if temp > 0 {
			name = "softmax"
		}
		b.Run(name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.RouterTemperature = temp
			rng := seeded(1)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Select(cfg, 16, 4096, 256, cands, rng); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(cands)), "ns/candidate")
		})
	}
}
