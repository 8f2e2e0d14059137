package decide

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/scheduling"
)

func TestLoraAffinityScores(t *testing.T) {
	r0 := kv.WorkerWithDpRank{WorkerID: 1}
	r1 := kv.WorkerWithDpRank{WorkerID: 2}
	cands := []scheduling.Candidate{{Worker: r0}, {Worker: r1}}
	var a Adapters
	t0 := time.Unix(1000, 0).UnixNano()
	a.Routed("sql", r1, t0)
	for _, tc := range []struct {
		name string
		lora string
		now  int64
		want []float64
	}{
		{"base model costs nothing", "", t0, []float64{0, 0}},
		{"warm rank is free", "sql", t0 + int64(time.Minute), []float64{1, 0}},
		{"other adapter is cold everywhere", "chat", t0, []float64{1, 1}},
		{"cold after the window", "sql", t0 + int64(LoraWarmFor) + 1, []float64{1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoraAffinity{}.Score(&Context{Lora: tc.lora, Now: tc.now, Adapters: &a}, cands, nil)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("costs = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAdaptersBounded(t *testing.T) {
	var a Adapters
	for i := range maxAdapters + 10 {
		a.Routed(fmt.Sprintf("a%d", i), kv.WorkerWithDpRank{WorkerID: 1}, int64(i))
	}
	if a.Len() != maxAdapters {
		t.Fatalf("adapters = %d, want the bound %d", a.Len(), maxAdapters)
	}
	if a.Warm("a0", kv.WorkerWithDpRank{WorkerID: 1}, 20) {
		t.Fatal("the least recently routed adapter should be forgotten first")
	}
	if !a.Warm(fmt.Sprintf("a%d", maxAdapters+9), kv.WorkerWithDpRank{WorkerID: 1}, int64(maxAdapters+9)) {
		t.Fatal("the newest adapter was lost")
	}
	for r := range maxRanksPerAdaptr + 5 {
		a.Routed("wide", kv.WorkerWithDpRank{WorkerID: kv.WorkerID(r)}, int64(r))
	}
	if n := len(a.byName["wide"].ranks); n != maxRanksPerAdaptr {
		t.Fatalf("ranks of one adapter = %d, want the bound %d", n, maxRanksPerAdaptr)
	}
}

// A pipeline with lora-affinity keeps an adapter's requests on the rank
// that served it when the cost is otherwise even.
func TestLoraAffinityPipeline(t *testing.T) {
	pipe, err := Build(Spec{Admitter: "admit-all", Scorers: []WeightedName{{Name: "cost", Weight: 1}, {Name: "lora-affinity", Weight: 10}},
		Picker: "temperature"})
	if err != nil {
		t.Fatal(err)
	}
	r0, r1 := kv.WorkerWithDpRank{WorkerID: 1}, kv.WorkerWithDpRank{WorkerID: 2}
	cands := []scheduling.Candidate{{Worker: r0}, {Worker: r1}}
	var a Adapters
	a.Routed("sql", r1, 0)
	cfg := scheduling.DefaultConfig()
	c := &Context{Config: &cfg, BlockSize: 16, ISL: 64, Blocks: 4, Lora: "sql", Adapters: &a,
		Ranks: &Ranks{Budgets: map[kv.WorkerID]uint64{}}}
	costs, err := pipe.score(c, cands, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !(costs[1] < costs[0]) || costs[0]-costs[1] != 10 {
		t.Fatalf("costs = %v, want the warm rank cheaper by the weight 10", costs)
	}
}
