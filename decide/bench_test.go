package decide

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// benchmarkDecide steps one decision over 64 candidates (Start, Decide),
// with or without a route receipt.
func benchmarkDecide(b *testing.B, explain, encode bool) {
	d := mustNew(b, testConfig(scheduling.CostDynamo, 0), [2]uint64{1, 2})
	ids := make([]uint64, 64)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	ranks := testRanks(ids...)
	base := randomCandidates(rand.New(rand.NewPCG(1, 1)), ranks, 1024)
	cands := make([]scheduling.Candidate, len(base))
	req := &messages.RouteRequest{RequestId: "r", TokenIds: tokens(1024)}
	now := time.Unix(100, 0)
	b.ReportAllocs()
	for b.Loop() {
		copy(cands, base)
		p := d.Step(now, &Start{Req: req, Ranks: ranks})[0].(*Ask).Plan
		effs := d.Step(now, &Decide{Req: req, Plan: p, Ranks: ranks, Candidates: cands, Blocks: 64, Explain: explain})
		if encode {
			// As the scheduler keeps it: the receipt as JSON.
			if _, err := json.Marshal(effs[len(effs)-1].(*Answer).Receipt); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkDecide64(b *testing.B)        { benchmarkDecide(b, false, false) }
func BenchmarkDecide64Explain(b *testing.B) { benchmarkDecide(b, true, false) }

// BenchmarkDecide64ExplainJSON adds encoding the receipt, what a kept
// receipt costs the scheduler (docs/receipts.md picks the sample from it).
func BenchmarkDecide64ExplainJSON(b *testing.B) { benchmarkDecide(b, true, true) }
