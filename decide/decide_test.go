package decide

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/tracking"
)

const blockSize = 16

func testRanks(ids ...uint64) *Ranks {
	r := &Ranks{Budgets: map[kv.WorkerID]uint64{}}
	set := map[kv.WorkerWithDpRank]bool{}
	for _, id := range ids {
		w := kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id)}
		r.List = append(r.List, w)
		r.Budgets[w.WorkerID] = 1024
		set[w] = true
	}
	r.Has = func(w kv.WorkerWithDpRank) bool { return set[w] }
	return r
}

func testConfig(cost scheduling.CostModel, temp float64) Config {
	sc := scheduling.DefaultConfig()
	sc.RouterCost, sc.RouterTemperature = cost, temp
	return Config{Scheduling: sc, Limits: scheduling.DefaultLimits(), BlockSize: blockSize, Stride: 1, TrackActiveBlocks: true}
}

func tokens(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

func mustNew(t testing.TB, cfg Config, seed [2]uint64) *Decider {
	t.Helper()
	d, err := New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// start steps a request through Start and returns its plan (failing the
// test on a refusal).
func start(t *testing.T, d *Decider, now time.Time, in Start) *Plan {
	t.Helper()
	effs := d.Step(now, &in)
	if len(effs) != 1 {
		t.Fatalf("start: %d effects", len(effs))
	}
	ask, ok := effs[0].(*Ask)
	if !ok {
		t.Fatalf("start refused: %+v", effs[0])
	}
	return ask.Plan
}

func randomCandidates(rng *rand.Rand, ranks *Ranks, isl int) []scheduling.Candidate {
	blocks := uint64(isl / blockSize)
	out := make([]scheduling.Candidate, len(ranks.List))
	for i, w := range ranks.List {
		out[i] = scheduling.Candidate{Worker: w, HasLoad: true, NewBlocks: blocks,
			DeviceOverlap:       uint32(rng.IntN(int(blocks) + 1)),
			ActivePrefillTokens: uint64(rng.IntN(4) * 256), ActiveBlocks: float64(rng.IntN(3) * 8),
			ActiveRequests: rng.IntN(3), CapacityBlocks: 64}
	}
	return out
}

// The default pipeline, as the flags make it and as built from its
// names (what a policy file writes), is scheduling.Select, bit for bit:
// the same rank and the same random stream, for both costs, at
// temperature 0 (ties broken by draws) and above.
func TestDefaultPipelineIsSelect(t *testing.T) {
	built, err := Build(DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cost  scheduling.CostModel
		temp  float64
		built bool
	}{{scheduling.CostDynamo, 0, false}, {scheduling.CostDynamo, 0.7, false}, {scheduling.CostTTFT, 0, false},
		{scheduling.CostTTFT, 0.4, false}, {scheduling.CostDynamo, 0, true}, {scheduling.CostTTFT, 0.4, true}} {
		cfg := testConfig(tc.cost, tc.temp)
		if tc.built {
			cfg.Pipeline = built
		}
		d := mustNew(t, cfg, [2]uint64{1, 2})
		ref := rand.New(rand.NewPCG(1, 2))
		gen := rand.New(rand.NewPCG(9, 9))
		ranks := testRanks(1, 2, 3, 4, 5)
		now := time.Unix(100, 0)
		for n := range 300 {
			isl := 16 * (1 + gen.IntN(8))
			req := &messages.RouteRequest{RequestId: "r", TokenIds: tokens(isl), UpdateStates: n%3 != 0}
			p := start(t, d, now, Start{Req: req, Ranks: ranks})
			cands := randomCandidates(gen, ranks, isl)
			want, err := scheduling.Select(cfg.Scheduling, blockSize, isl, isl/blockSize, cands, ref)
			if err != nil {
				t.Fatal(err)
			}
			effs := d.Step(now, &Decide{Req: req, Plan: p, Ranks: ranks, Candidates: cands, Blocks: isl / blockSize})
			ans := effs[len(effs)-1].(*Answer)
			if got := RankOf(ans.Reply.Worker); got != want.Worker || ans.Reply.CachedTokens != want.CachedTokens {
				t.Fatalf("%s T=%v decision %d: %v, Select %v", tc.cost, tc.temp, n, got, want.Worker)
			}
			if req.UpdateStates != (len(effs) == 2) {
				t.Fatalf("decision %d: %d effects, update %v", n, len(effs), req.UpdateStates)
			}
		}
		if d.rng.Uint64() != ref.Uint64() {
			t.Fatalf("%s T=%v: the random streams parted", tc.cost, tc.temp)
		}
	}
}

// Asking for a receipt changes no decision, and the receipt names every
// candidate with its cost, the winner, the margin and the draws.
func TestReceiptChangesNothing(t *testing.T) {
	cfg := testConfig(scheduling.CostDynamo, 0)
	plain, explained := mustNew(t, cfg, [2]uint64{3, 4}), mustNew(t, cfg, [2]uint64{3, 4})
	gen := rand.New(rand.NewPCG(5, 5))
	ranks := testRanks(1, 2, 3)
	now := time.Unix(100, 0)
	sawDraw := false
	for n := range 200 {
		isl := 16 * (1 + gen.IntN(4))
		req := &messages.RouteRequest{RequestId: "r", TokenIds: tokens(isl)}
		cands := randomCandidates(gen, ranks, isl)
		c2 := append([]scheduling.Candidate(nil), cands...)
		a := plain.Step(now, &Decide{Req: req, Plan: start(t, plain, now, Start{Req: req, Ranks: ranks}), Ranks: ranks, Candidates: cands, Blocks: isl / blockSize})
		b := explained.Step(now, &Decide{Req: req, Plan: start(t, explained, now, Start{Req: req, Ranks: ranks}), Ranks: ranks,
			Candidates: c2, Blocks: isl / blockSize, Explain: true})
		x, y := a[0].(*Answer), b[0].(*Answer)
		if RankOf(x.Reply.Worker) != RankOf(y.Reply.Worker) || x.Receipt != nil {
			t.Fatalf("decision %d: %v vs %v with a receipt", n, x.Reply.Worker, y.Reply.Worker)
		}
		r := y.Receipt
		if r == nil || len(r.Candidates) != 3 || r.Winner != RankOf(y.Reply.Worker).String() || r.Ties < 1 {
			t.Fatalf("decision %d: receipt %+v", n, r)
		}
		if r.Ties == 1 && r.Margin <= 0 && len(r.Candidates) > 1 {
			t.Fatalf("decision %d: a sole minimum with margin %v", n, r.Margin)
		}
		if r.Ties > 1 {
			sawDraw = sawDraw || len(r.Draws) > 0
		}
		for _, c := range r.Candidates {
			if c.Terms.PrefillLoad+c.Terms.DecodeLoad+c.Terms.RequestLoad != c.Cost {
				t.Fatalf("decision %d: terms %+v do not add up to %v", n, c.Terms, c.Cost)
			}
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatal(err)
		}
	}
	if !sawDraw {
		t.Fatal("no tie was broken by a recorded draw")
	}
}

func TestStartRefuses(t *testing.T) {
	ranks := testRanks(1, 2)
	pinned := RankMsg(kv.WorkerWithDpRank{WorkerID: 9})
	for _, tc := range []struct {
		name    string
		req     *messages.RouteRequest
		in      Start
		outcome string
		code    messages.RouteErrorCode
		text    string
	}{
		{"no tokens", &messages.RouteRequest{RequestId: "a"}, Start{}, "bad_request", messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST, "must not be empty"},
		{"prefill suffix", &messages.RouteRequest{RequestId: "a#prefill", TokenIds: tokens(4), UpdateStates: true}, Start{},
			"bad_request", messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST, "suffix"},
		{"duplicate", &messages.RouteRequest{RequestId: "a", TokenIds: tokens(4), UpdateStates: true},
			Start{Tracked: trackedAll{}}, "bad_request", messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST, "already active"},
		{"client at its bound", &messages.RouteRequest{RequestId: "a", TokenIds: tokens(4), UpdateStates: true, Client: "token:ab"},
			Start{Tracked: clientFull{}}, "client_limit", messages.RouteErrorCode_ROUTE_ERROR_CLIENT_LIMIT, "client"},
		{"session id", &messages.RouteRequest{RequestId: "a", TokenIds: tokens(4), SessionId: "x"},
			Start{Session: SessionAnswer{IDError: errors.New("too long")}}, "bad_request", messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST, "session_id"},
		{"pinned elsewhere", &messages.RouteRequest{RequestId: "a", TokenIds: tokens(4), PinnedWorker: pinned}, Start{},
			"no_worker", messages.RouteErrorCode_ROUTE_ERROR_NO_ELIGIBLE_WORKER, "pinned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := mustNew(t, testConfig(scheduling.CostDynamo, 0), [2]uint64{})
			tc.in.Req, tc.in.Ranks = tc.req, ranks
			effs := d.Step(time.Unix(1, 0), &tc.in)
			ans, ok := effs[0].(*Answer)
			if !ok || ans.Err == nil || ans.Outcome != tc.outcome || ans.Err.Code != tc.code || !strings.Contains(ans.Err.Message, tc.text) {
				t.Fatalf("got %+v", effs)
			}
		})
	}
}

// A session bound to a fit rank stays there even when another rank holds
// the prompt; over the queue threshold it moves, and the move says why.
func TestSessionAffinity(t *testing.T) {
	cfg := testConfig(scheduling.CostDynamo, 0)
	cfg.Scheduling.RouterQueueThreshold = 1
	d := mustNew(t, cfg, [2]uint64{})
	ranks := testRanks(1, 2)
	now := time.Unix(100, 0)
	bound := SessionAnswer{Bound: true, Worker: ranks.List[0], LastUsed: now.Add(-time.Second).UnixNano()}
	req := &messages.RouteRequest{RequestId: "a", TokenIds: tokens(64), UpdateStates: true, SessionId: "s"}
	cands := func(load uint64) []scheduling.Candidate {
		return []scheduling.Candidate{
			{Worker: ranks.List[0], HasLoad: true, NewBlocks: 4, ActivePrefillTokens: load},
			{Worker: ranks.List[1], HasLoad: true, NewBlocks: 4, DeviceOverlap: 4},
		}
	}
	effs := d.Step(now, &Decide{Req: req, Plan: start(t, d, now, Start{Req: req, Ranks: ranks, Session: bound}), Ranks: ranks,
		Candidates: cands(0), Blocks: 4, Explain: true})
	s, ans := effs[1].(*Session), effs[2].(*Answer)
	if RankOf(ans.Reply.Worker) != ranks.List[0] || !s.WasBound || s.MoveReason != "" || ans.Receipt.Session != "stay" ||
		ans.Receipt.SessionAge != time.Second || !ans.Receipt.Candidates[1].Filtered {
		t.Fatalf("fit: %+v %+v receipt %+v", s, ans.Reply, ans.Receipt)
	}
	effs = d.Step(now, &Decide{Req: req, Plan: start(t, d, now, Start{Req: req, Ranks: ranks, Session: bound}), Ranks: ranks,
		Candidates: cands(2000), Blocks: 4, Explain: true})
	s, ans = effs[1].(*Session), effs[2].(*Answer)
	if RankOf(ans.Reply.Worker) != ranks.List[1] || s.MoveReason != "busy" || ans.Receipt.Session != "move:busy" {
		t.Fatalf("overloaded: %+v %+v receipt %+v", s, ans.Reply, ans.Receipt)
	}
}

// Every candidate over the threshold parks a recorded request; a query
// is answered anyway. The queue keeps a re-checked request in place,
// expires it after MaxQueueWait, and refuses a push when full.
func TestQueueThresholdAdmits(t *testing.T) {
	cfg := testConfig(scheduling.CostDynamo, 0)
	cfg.Scheduling.RouterQueueThreshold = 1
	cfg.Scheduling.MaxQueueLength = 1
	cfg.MaxQueueWait = 2 * time.Second
	d := mustNew(t, cfg, [2]uint64{})
	ranks := testRanks(1, 2)
	now := time.Unix(100, 0)
	for _, update := range []bool{true, false} {
		req := &messages.RouteRequest{RequestId: "a", TokenIds: tokens(64), UpdateStates: update}
		cands := []scheduling.Candidate{{Worker: ranks.List[0], HasLoad: true, ActivePrefillTokens: 5000, DeviceOverlap: 2},
			{Worker: ranks.List[1], HasLoad: true, ActivePrefillTokens: 5000}}
		p := start(t, d, now, Start{Req: req, Ranks: ranks})
		effs := d.Step(now, &Decide{ID: 7, Req: req, Plan: p, Ranks: ranks, Candidates: cands, Blocks: 4})
		q, queued := effs[0].(*Queue)
		if queued != update || (queued && (q.BestCached != 32 || !q.Parked || d.QueueLen() != 1)) {
			t.Fatalf("update %v: %+v", update, effs)
		}
		if !update {
			continue
		}
		// A re-check that still finds every rank overloaded leaves it in
		// place; MaxQueueWait later it is taken out and refused.
		effs = d.Step(now, &Decide{ID: 7, Req: req, Plan: p, Ranks: ranks, Candidates: cands, Blocks: 4})
		if q, ok := effs[0].(*Queue); !ok || q.Parked || d.QueueLen() != 1 {
			t.Fatalf("re-check: %+v, queue %d", effs, d.QueueLen())
		}
		// The head is re-checked one at a time: not again until its
		// re-check parks it again or it is forgotten.
		if id, ok := d.Recheck(); !ok || id != 7 {
			t.Fatalf("recheck %d %v", id, ok)
		}
		if id, ok := d.Recheck(); ok {
			t.Fatalf("a second re-check of %d while one is under way", id)
		}
		d.Step(now, &Decide{ID: 7, Req: req, Plan: p, Ranks: ranks, Candidates: cands, Blocks: 4})
		if id, ok := d.Recheck(); !ok || id != 7 {
			t.Fatalf("recheck after parking again: %d %v", id, ok)
		}
		if ids := d.Expire(now.Add(time.Second)); len(ids) != 0 {
			t.Fatalf("expired %v before the wait bound", ids)
		}
		if ids := d.Expire(now.Add(3 * time.Second)); len(ids) != 1 || ids[0] != 7 {
			t.Fatalf("expired %v, want [7]", ids)
		}
		if rerr := d.WaitedTooLong(p); p.Queued || !strings.Contains(rerr.Message, "waited 2s") || rerr.QueueLimit != 1 {
			t.Fatalf("refusal %+v, plan queued %v", rerr, p.Queued)
		}
	}
	// A full queue refuses as overloaded.
	req := &messages.RouteRequest{RequestId: "b", TokenIds: tokens(64), UpdateStates: true}
	cands := []scheduling.Candidate{{Worker: ranks.List[0], HasLoad: true, ActivePrefillTokens: 5000}}
	for id := range uint64(2) {
		effs := d.Step(now, &Decide{ID: 10 + id, Req: req, Plan: start(t, d, now, Start{Req: req, Ranks: ranks}), Ranks: ranks,
			Candidates: cands, Blocks: 4})
		ans, refused := effs[0].(*Answer)
		if refused != (id == 1) || (refused && (ans.Outcome != "overloaded" || ans.Err.QueueDepth != 1)) {
			t.Fatalf("push %d: %+v", id, effs[0])
		}
	}
}

func TestBuild(t *testing.T) {
	p, err := Build(DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(p.names(), " "), strings.Join(DefaultPipeline().names(), " "); got != want {
		t.Fatalf("default spec builds %s, want %s", got, want)
	}
	for _, bad := range []Spec{
		{Admitter: "nope", Scorers: []WeightedName{{"cost", 1}}, Picker: "temperature"},
		{Admitter: "queue-threshold", Filters: []string{"nope"}, Scorers: []WeightedName{{"cost", 1}}, Picker: "temperature"},
		{Admitter: "queue-threshold", Scorers: []WeightedName{{"cost", -1}}, Picker: "temperature"},
		{Admitter: "queue-threshold", Scorers: []WeightedName{{"cost", 0}}, Picker: "temperature"},
		{Admitter: "queue-threshold", Scorers: []WeightedName{{"cost", 1}}, Picker: "nope"},
	} {
		if _, err := Build(bad); err == nil {
			t.Fatalf("%+v built", bad)
		}
	}
}

// Weighted scorers add up: dynamo + 0.5 × ttft is each candidate's sum.
func TestWeightedScorers(t *testing.T) {
	p, err := Build(Spec{Admitter: "admit-all", Scorers: []WeightedName{{"cost-dynamo", 1}, {"cost-ttft", 0.5}}, Picker: "temperature"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := scheduling.DefaultConfig()
	ranks := testRanks(1, 2, 3)
	cands := randomCandidates(rand.New(rand.NewPCG(1, 1)), ranks, 64)
	c := &Context{Config: &cfg, BlockSize: blockSize, ISL: 64, Blocks: 4, Ranks: ranks}
	got, err := p.score(c, cands, nil)
	if err != nil {
		t.Fatal(err)
	}
	dyn, _ := scheduling.Costs(cfg, blockSize, 64, 4, cands)
	cfg.RouterCost = scheduling.CostTTFT
	ttft, _ := scheduling.Costs(cfg, blockSize, 64, 4, cands)
	for i := range got {
		if got[i] != dyn[i]+0.5*ttft[i] {
			t.Fatalf("candidate %d: %v, want %v + 0.5 × %v", i, got[i], dyn[i], ttft[i])
		}
	}
}

// trackedAll holds every id.
type trackedAll struct{}

func (trackedAll) Lookup(string) (tracking.Entry, bool) { return tracking.Entry{}, true }
func (trackedAll) ClientActive(string) int              { return 0 }

// clientFull holds no id; every client is at the per-client bound.
type clientFull struct{}

func (clientFull) Lookup(string) (tracking.Entry, bool) { return tracking.Entry{}, false }
func (clientFull) ClientActive(string) int              { return scheduling.DefaultMaxActiveRequestsPerClient }
