package decide

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sessions"
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

// BenchmarkNodeRoute steps one routed request through the Node as the
// scheduler actor does, over 64 ranks and one shard: the route call, the
// shard's reply (the decision, its add and gossip), the client's free,
// and the chosen rank's publication that it applied the add (one
// allocation of the benchmark's own). What the Node allocates is the
// messages its effects carry; the effects themselves are reused.
func BenchmarkNodeRoute(b *testing.B) {
	ids := make([]uint64, 64)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	n, err := NewNode(NodeConfig{Decider: testConfig(scheduling.CostDynamo, 0), Replica: "local", Shards: 1,
		DecisionTimeout: time.Second, KVEvents: true, Sessions: sessions.Config{TTL: time.Minute, MaxSessions: 16, MaxIDBytes: 64, ReplicaID: "local"}})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(100, 0)
	n.Step(now, &RankTable{Ranks: testRanks(ids...), Incarnation: func(kv.WorkerWithDpRank) (string, bool) { return "1", true }})
	route := &Route{Req: &messages.RouteRequest{RequestId: "r", TokenIds: tokens(1024), UpdateStates: true}}
	reply := &messages.OverlapReply{}
	free := Lifecycle{M: &messages.RequestLifecycle{RequestId: "r",
		Step: &messages.RequestLifecycle_Free{Free: &messages.FreeRequest{RequestId: "r"}}}}
	applied := map[kv.WorkerWithDpRank]uint64{}
	b.ReportAllocs()
	for b.Loop() {
		route.Req.CancelToken++
		reply.QueryId = n.Step(now, route)[1].(*AskShards).Query.QueryId
		effs := n.Step(now, Overlap{M: reply})
		a, ok := effs[len(effs)-1].(*Answer)
		if !ok {
			b.Fatal("no answer")
		}
		w := a.Reply.Worker
		n.Step(now, free)
		applied[RankOf(w)]++
		n.Step(now, RankLoad{M: &messages.RankLoad{Worker: w, AddsApplied: applied[RankOf(w)]}})
	}
}
