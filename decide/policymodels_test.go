package decide

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// The lora.yaml policy gives its model the lora-affinity scorer: once a
// rank served an adapter, the adapter's requests stay on it while the
// cost otherwise ties; every other model (and a request naming none)
// runs the default pipeline, whose tie-breaks spread them.
func TestPolicyModelPipelines(t *testing.T) {
	data, err := os.ReadFile("testdata/policies/lora.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pol, err := ParsePolicy(data)
	if err != nil {
		t.Fatal(err)
	}
	def, models, err := pol.Pipelines()
	if err != nil {
		t.Fatal(err)
	}
	const model = "llama-3-8b-lora"
	cfg := testConfig(scheduling.CostTTFT, 0)
	cfg.Pipeline, cfg.Models = def, models
	d := mustNew(t, cfg, [2]uint64{9, 9})
	ranks := testRanks(1, 2, 3, 4)
	now := time.Unix(100, 0)
	even := func() []scheduling.Candidate {
		out := make([]scheduling.Candidate, len(ranks.List))
		for i, w := range ranks.List {
			out[i] = scheduling.Candidate{Worker: w, NewBlocks: 4, HasLoad: true}
		}
		return out
	}
	route := func(model string, update, explain bool) (kv.WorkerWithDpRank, *Receipt) {
		t.Helper()
		req := &messages.RouteRequest{RequestId: "r", TokenIds: tokens(64), LoraName: "sql", Model: model, UpdateStates: update}
		p := start(t, d, now, Start{Req: req, Ranks: ranks})
		a := d.Step(now, &Decide{Req: req, Plan: p, Ranks: ranks, Candidates: even(), Blocks: 4, Explain: explain})
		ans := a[len(a)-1].(*Answer)
		if ans.Reply == nil {
			t.Fatalf("%s: %+v", model, ans.Err)
		}
		return RankOf(ans.Reply.Worker), ans.Receipt
	}
	first, _ := route(model, true, false) // the adapter is now warm on first
	for range 20 {
		if w, _ := route(model, false, false); w != first {
			t.Fatalf("%s went to %v, want the rank that served its adapter, %v", model, w, first)
		}
	}
	_, rc := route(model, false, true)
	if !slices.Contains(rc.Pipeline, "score:lora-affinity*0.05") || !slices.Contains(rc.Pipeline, "score:cost-ttft") || rc.Margin != 0.05 ||
		rc.Cost != "ttft" {
		t.Fatalf("%s's receipt: pipeline %v margin %v cost %s, want lora-affinity deciding by its weight", model, rc.Pipeline, rc.Margin, rc.Cost)
	}
	for _, c := range rc.Candidates {
		warm := c.Worker == first.String()
		if got := c.Scores["lora-affinity"]; (got == 0) != warm || c.Scores["cost-ttft"]+0.05*got != c.Cost {
			t.Fatalf("candidate %s: scores %v, cost %v", c.Worker, c.Scores, c.Cost)
		}
	}
	for _, other := range []string{"", "another-model"} {
		seen := map[kv.WorkerWithDpRank]bool{}
		for range 40 {
			w, _ := route(other, false, false)
			seen[w] = true
		}
		if len(seen) < 2 {
			t.Fatalf("model %q: every tie went to %v; the default pipeline has no adapter affinity", other, seen)
		}
		_, rc := route(other, false, true)
		if slices.ContainsFunc(rc.Pipeline, func(s string) bool { return strings.Contains(s, "lora") }) || !rc.Close || rc.Ties != len(ranks.List) {
			t.Fatalf("model %q's receipt: pipeline %v close %v ties %d, want the default's four-way tie", other, rc.Pipeline, rc.Close, rc.Ties)
		}
	}
}

func TestIsClose(t *testing.T) {
	for _, tc := range []struct {
		costs []float64
		want  bool
	}{
		{nil, false},
		{[]float64{3}, false},
		{[]float64{2, 2}, true},
		{[]float64{100, 100.5, 300}, true},
		{[]float64{100, 102}, false},
		{[]float64{5, 1, 1.005}, true},
		{[]float64{0, 0.001}, false},
	} {
		if got := IsClose(tc.costs); got != tc.want {
			t.Errorf("IsClose(%v) = %v, want %v", tc.costs, got, tc.want)
		}
	}
}
