package decide

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sessions"
	"github.com/kvrouter/kvrouter/trust"
)

// nodeWorld drives a Node on a fake clock: one shard, the ranks given,
// and the effects of every step kept for the test to read.
type nodeWorld struct {
	t   *testing.T
	n   *Node
	now time.Time
}

func newNodeWorld(t *testing.T, mod func(*NodeConfig), ids ...uint64) *nodeWorld {
	t.Helper()
	cfg := NodeConfig{Decider: testConfig(scheduling.CostDynamo, 0), Replica: "local", Shards: 1,
		DecisionTimeout: time.Second, KVEvents: true,
		Sessions: sessions.Config{TTL: time.Minute, MaxSessions: 16, MaxIDBytes: 64, ReplicaID: "local"}}
	if mod != nil {
		mod(&cfg)
	}
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &nodeWorld{t: t, n: n, now: time.Unix(1_700_000_000, 0)}
	r := testRanks(ids...)
	w.step(&RankTable{Ranks: r, Incarnation: func(kv.WorkerWithDpRank) (string, bool) { return "1", true }})
	return w
}

// step copies the effects (they are the Node's until its next step).
func (w *nodeWorld) step(in Input) []Effect {
	return append([]Effect(nil), w.n.Step(w.now, in)...)
}

func all[T any](effs []Effect) []*T {
	var out []*T
	for _, e := range effs {
		if v, ok := any(e).(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

func one[T any](t *testing.T, effs []Effect) *T {
	t.Helper()
	got := all[T](effs)
	if len(got) != 1 {
		t.Fatalf("%d effects of type %T, want 1: %v", len(got), new(T), effs)
	}
	return got[0]
}

func rank(id uint64) kv.WorkerWithDpRank { return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id)} }

// route routes id (recorded) and answers its one shard with no overlap;
// it returns the decision's answer and effects.
func (w *nodeWorld) route(req *messages.RouteRequest) (*Answer, []Effect) {
	w.t.Helper()
	if req.TokenIds == nil {
		req.TokenIds = tokens(64)
	}
	effs := w.step(&Route{Req: req, Caller: "caller-" + req.RequestId})
	if a := all[Answer](effs); len(a) == 1 {
		return a[0], effs
	}
	ask := one[AskShards](w.t, effs)
	effs = w.step(Overlap{M: &messages.OverlapReply{QueryId: ask.Query.QueryId}})
	return one[Answer](w.t, effs), effs
}

func routed(id string) *messages.RouteRequest {
	return &messages.RouteRequest{RequestId: id, UpdateStates: true}
}

func TestNodeRouteRecordsTracksAndGossips(t *testing.T) {
	w := newNodeWorld(t, nil, 1)
	a, effs := w.route(routed("a"))
	if a.Err != nil || a.To != "caller-a" || a.Outcome != "routed" || a.Blocks != 4 {
		t.Fatalf("answer %+v", a)
	}
	add := one[ToRank](t, effs)
	if m, ok := add.Msg.(*messages.AddRequest); !ok || m.RequestId != "a" || add.Rank != rank(1) || add.Ask {
		t.Fatalf("add %+v", add)
	}
	if g := one[Gossip](t, effs); g.Event.GetAdd().GetRequestId() != "a" {
		t.Fatalf("gossip %v", g.Event)
	}
	if tk := one[TakeOver](t, effs); tk.ID != "a" {
		t.Fatalf("take over %q", tk.ID)
	}
	if p := all[Predict](effs); len(p) != 0 {
		t.Fatalf("event mode with an exact index predicts: %v", p)
	}
	if w.n.local.Len() != 1 || w.n.Waiting() {
		t.Fatalf("tracked %d, waiting %v", w.n.local.Len(), w.n.Waiting())
	}
	// The same id with another prompt while it is active is refused.
	again := routed("a")
	again.TokenIds = tokens(65)
	if a, _ := w.route(again); a.Err.GetCode() != messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST || a.To != "caller-a" {
		t.Fatalf("duplicate: %+v", a)
	}
}

func TestNodePredicts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mod      func(*NodeConfig)
		notExact bool
		want     int
	}{
		{"event mode, exact", nil, false, 0},
		{"approximate mode", func(c *NodeConfig) { c.KVEvents = false }, false, 1},
		{"predicted ttl", func(c *NodeConfig) { c.PredictedTTL = time.Second }, false, 1},
		{"index not exact", nil, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newNodeWorld(t, tc.mod, 1)
			if tc.notExact {
				w.step(TrustTable{NotExact: map[kv.WorkerWithDpRank]trust.State{rank(1): trust.Untrusted}})
			}
			_, effs := w.route(routed("a"))
			p := all[Predict](effs)
			if len(p) != tc.want {
				t.Fatalf("%d predictions, want %d", len(p), tc.want)
			}
			if tc.want == 1 && (p[0].Rank != rank(1) || len(p[0].Msg.LocalHashes) != 4) {
				t.Fatalf("prediction %+v", p[0])
			}
		})
	}
}

func TestNodeLifecycle(t *testing.T) {
	w := newNodeWorld(t, nil, 1)
	w.route(routed("a"))
	free := func(id string) []Effect {
		return w.step(Lifecycle{M: &messages.RequestLifecycle{RequestId: id,
			Step: &messages.RequestLifecycle_Free{Free: &messages.FreeRequest{RequestId: id}}}})
	}
	// A peer's request (or one unknown here) goes to the replication edge.
	if effs := free("b"); len(all[ToReplication](effs)) != 1 || len(effs) != 1 {
		t.Fatalf("unknown id: %v", effs)
	}
	// Output growth reaches the rank and is not gossiped.
	effs := w.step(Lifecycle{M: &messages.RequestLifecycle{RequestId: "a",
		Step: &messages.RequestLifecycle_OutputBlock{OutputBlock: &messages.AddOutputBlock{RequestId: "a"}}}})
	if len(all[Gossip](effs)) != 0 || len(all[ToRank](effs)) != 1 || !one[Respond](t, effs).Msg.(*messages.LifecycleReply).Found {
		t.Fatalf("output block: %v", effs)
	}
	effs = free("a")
	if one[Gossip](t, effs).Event.GetFree().GetRequestId() != "a" || len(all[ToRank](effs)) != 1 {
		t.Fatalf("free: %v", effs)
	}
	if w.n.local.Len() != 0 {
		t.Fatal("freed request still tracked")
	}
	if effs := free("a"); len(all[ToReplication](effs)) != 1 {
		t.Fatalf("second free: %v", effs)
	}
	// A request whose rank left is untracked and reported missing.
	w.route(routed("c"))
	w.step(&RankTable{Ranks: testRanks(2), Incarnation: func(kv.WorkerWithDpRank) (string, bool) { return "1", true }})
	if w.n.local.Len() != 0 {
		t.Fatal("a request of an unregistered rank stays tracked")
	}
}

func TestNodeCancel(t *testing.T) {
	w := newNodeWorld(t, nil, 1)
	// In flight: answered as cancelled, and its late reply is ignored.
	req := routed("a")
	req.CancelToken, req.TokenIds = 7, tokens(64)
	qid := one[AskShards](t, w.step(&Route{Req: req, Caller: "c"})).Query.QueryId
	a := one[Answer](t, w.step(Cancel{M: &messages.CancelRoute{CancelToken: 7, RequestId: "a"}}))
	if a.Err.GetCode() != messages.RouteErrorCode_ROUTE_ERROR_CANCELLED || a.Outcome != "cancelled" || a.To != "c" {
		t.Fatalf("cancel in flight: %+v", a)
	}
	if effs := w.step(Overlap{M: &messages.OverlapReply{QueryId: qid}}); len(effs) != 0 {
		t.Fatalf("late reply: %v", effs)
	}
	// Recorded: freed and gossiped, unless the token is another call's.
	req = routed("b")
	req.CancelToken = 8
	w.route(req)
	if effs := w.step(Cancel{M: &messages.CancelRoute{CancelToken: 9, RequestId: "b"}}); len(effs) != 0 {
		t.Fatalf("another call's token: %v", effs)
	}
	effs := w.step(Cancel{M: &messages.CancelRoute{CancelToken: 8, RequestId: "b"}})
	if c := one[Count](t, effs); c.Metric != CountDecision || c.Label != "cancelled" {
		t.Fatalf("count %+v", c)
	}
	if one[Gossip](t, effs).Event.GetFree().GetRequestId() != "b" || w.n.local.Len() != 0 {
		t.Fatalf("cancel recorded: %v", effs)
	}
}

func TestNodePeerStepAndStaleFrees(t *testing.T) {
	w := newNodeWorld(t, nil, 1)
	w.route(routed("a"))
	w.route(routed("b"))
	ev := func(origin, id string) PeerStep {
		return PeerStep{M: &messages.SequenceEvent{Origin: origin, Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: id}}}}
	}
	if effs := w.step(ev("local", "a")); len(effs) != 0 {
		t.Fatalf("own echo applied: %v", effs)
	}
	effs := w.step(ev("peer", "a"))
	if len(all[Gossip](effs)) != 0 || len(all[ToRank](effs)) != 1 || w.n.local.Len() != 1 {
		t.Fatalf("peer free: %v (tracked %d)", effs, w.n.local.Len())
	}
	effs = w.step(&StaleFreed{IDs: []string{"a", "b"}})
	if g := one[Gossip](t, effs); g.Event.GetFree().GetRequestId() != "b" || w.n.local.Len() != 0 {
		t.Fatalf("stale: %v", effs)
	}
}

func TestNodeDisaggregatedFreeTakesTheHop(t *testing.T) {
	w := newNodeWorld(t, nil, 1, 2)
	r := testRanks(1, 2)
	r.Roles = map[kv.WorkerWithDpRank]kv.Role{rank(1): kv.RolePrefill, rank(2): kv.RoleDecode}
	w.step(&RankTable{Ranks: r, Incarnation: func(kv.WorkerWithDpRank) (string, bool) { return "1", true }})
	a, _ := w.route(&messages.RouteRequest{RequestId: "a", UpdateStates: true, TokenIds: tokens(4096)})
	if a.Reply.GetPrefillRequestId() == "" || w.n.local.Len() != 2 {
		t.Fatalf("not a remote prefill: %+v, tracked %d", a.Reply, w.n.local.Len())
	}
	effs := w.step(Lifecycle{M: &messages.RequestLifecycle{RequestId: "a",
		Step: &messages.RequestLifecycle_Free{Free: &messages.FreeRequest{RequestId: "a"}}}})
	if g := all[Gossip](effs); len(g) != 2 || g[1].Event.GetFree().GetRequestId() != scheduling.PrefillRequestID("a") {
		t.Fatalf("free: %v", effs)
	}
	if w.n.local.Len() != 0 {
		t.Fatal("hop still tracked")
	}
}

func TestNodeTimeoutDecidesWithoutTheShard(t *testing.T) {
	w := newNodeWorld(t, nil, 1)
	one[AskShards](t, w.step(&Route{Req: &messages.RouteRequest{RequestId: "a", UpdateStates: true, TokenIds: tokens(64)}}))
	if effs := w.step(Tick{}); len(all[Answer](effs)) != 0 {
		t.Fatalf("answered before the deadline: %v", effs)
	}
	w.now = w.now.Add(1100 * time.Millisecond)
	effs := w.step(Tick{})
	if d := one[Degraded](t, effs); d.Reason != "shard_timeout" || d.Missing != 1 {
		t.Fatalf("degraded %+v", d)
	}
	if a := one[Answer](t, effs); a.Outcome != "routed" {
		t.Fatalf("answer %+v", a)
	}
	// Its block hashes are not reused: the shard may still read them.
	if len(w.n.localFree) != 0 {
		t.Fatal("a timed-out decision's hashes were recycled")
	}
}

func TestNodeTrustNotesAreSpaced(t *testing.T) {
	w := newNodeWorld(t, func(c *NodeConfig) { c.Trust = true }, 1)
	var notes int
	for i, d := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond} {
		w.now = w.now.Add(d)
		_, effs := w.route(routed(string(rune('a' + i))))
		notes += len(all[Routed](effs))
	}
	if notes != 2 { // at 0 and at 300ms
		t.Fatalf("%d routed notes, want 2", notes)
	}
	// A publication showing a started request with blocks to prefill is
	// a peer's decision: the rank owes events too.
	w.now = w.now.Add(time.Second)
	w.step(RankLoad{M: &messages.RankLoad{Worker: RankMsg(rank(1)), ActiveRequests: 1, ActivePrefillTokens: 10}})
	effs := w.step(RankLoad{M: &messages.RankLoad{Worker: RankMsg(rank(1)), ActiveRequests: 2, ActivePrefillTokens: 40}})
	if r := one[Routed](t, effs); r.Rank != rank(1) || r.At != w.now.UnixNano() {
		t.Fatalf("peer start: %+v", r)
	}
}

func TestNodeClientRefusalsAreReportedOncePerMinute(t *testing.T) {
	w := newNodeWorld(t, func(c *NodeConfig) { c.Decider.Limits.MaxActiveRequestsPerClient = 1 }, 1)
	req := func(id string) *messages.RouteRequest {
		return &messages.RouteRequest{RequestId: id, UpdateStates: true, Client: "x"}
	}
	w.route(req("a"))
	var reports []*ClientRefused
	for _, id := range []string{"b", "c"} {
		a, effs := w.route(req(id))
		if a.Outcome != "client_limit" {
			t.Fatalf("%s: %+v", id, a)
		}
		reports = append(reports, all[ClientRefused](effs)...)
	}
	w.now = w.now.Add(time.Minute)
	_, effs := w.route(req("d"))
	reports = append(reports, all[ClientRefused](effs)...)
	if len(reports) != 2 || reports[0].Active != 1 || reports[1].Suppressed != 1 {
		t.Fatalf("reports %+v", reports)
	}
}

func TestNodeSessions(t *testing.T) {
	w := newNodeWorld(t, nil, 1)
	req := routed("a")
	req.SessionId = "s"
	_, effs := w.route(req)
	if g := all[Gossip](effs); len(g) != 2 || g[1].Event.GetSessionBound().GetSessionId() != "s" {
		t.Fatalf("bind gossip: %v", effs)
	}
	if c := one[Count](t, effs); c.Label != "bound" {
		t.Fatalf("bind: %v", effs)
	}
	r := one[Respond](t, w.step(SessionQuery{M: &messages.SessionQuery{SessionId: "s"}})).Msg.(*messages.SessionReply)
	if !r.Found || RankOf(r.Worker) != rank(1) {
		t.Fatalf("query %+v", r)
	}
	// A peer's write that is not a session entry is counted, not applied.
	effs = w.step(&SessionUpdates{Events: []*messages.SequenceEvent{{Data: &messages.SequenceEvent_Free{}}}})
	if c := all[Count](effs); len(c) != 1 || c[0].Label != "rejected" {
		t.Fatalf("rejected: %v", effs)
	}
	// Idle past the TTL, it expires on a tick.
	w.now = w.now.Add(2 * time.Minute)
	effs = w.step(Tick{})
	if c := all[Count](effs); len(c) != 1 || c[0].Label != "expired" {
		t.Fatalf("expiry: %v", effs)
	}
	e := one[Respond](t, w.step(EndSession{M: &messages.EndSession{SessionId: "s"}})).Msg.(*messages.EndSessionReply)
	if e.Found {
		t.Fatal("an expired session was ended")
	}
}

func TestNodeQueuedRequestRunsWhenALoadDrops(t *testing.T) {
	w := newNodeWorld(t, func(c *NodeConfig) {
		c.Decider.Scheduling.RouterQueueThreshold = 0.5
		c.Decider.MaxQueueWait = time.Minute
	}, 1)
	// The rank publishes a load over the threshold: the request waits.
	busy := &messages.RankLoad{Worker: RankMsg(rank(1)), ActivePrefillTokens: 4096, ActiveRequests: 4}
	w.step(RankLoad{M: busy})
	req := &messages.RouteRequest{RequestId: "a", UpdateStates: true, TokenIds: tokens(64)}
	ask := one[AskShards](t, w.step(&Route{Req: req, Caller: "c"}))
	effs := w.step(Overlap{M: &messages.OverlapReply{QueryId: ask.Query.QueryId}})
	if c := one[Count](t, effs); c.Label != "queued" || !w.n.Waiting() {
		t.Fatalf("not queued: %v", effs)
	}
	// Its load drops: the re-check routes it.
	effs = w.step(RankLoad{M: &messages.RankLoad{Worker: RankMsg(rank(1))}})
	if a := one[Answer](t, effs); a.Outcome != "routed" || a.To != "c" {
		t.Fatalf("after the drop: %v", effs)
	}
}

func TestNodeRetriedRouteIsIdempotent(t *testing.T) {
	w := newNodeWorld(t, nil, 1, 2)
	req := func(toks int, model string) *messages.RouteRequest {
		return &messages.RouteRequest{RequestId: "a", UpdateStates: true, TokenIds: tokens(toks), Model: model,
			CancelToken: uint64(toks) + uint64(len(model))}
	}
	first, _ := w.route(req(70, ""))
	worker := RankOf(first.Reply.Worker)
	// The same call again: the recorded decision, nothing added or gossiped.
	effs := w.step(&Route{Req: req(70, ""), Caller: "retry"})
	a := one[Answer](t, effs)
	if a.Outcome != "retried" || a.To != "retry" || RankOf(a.Reply.Worker) != worker || a.Err != nil {
		t.Fatalf("retry: %+v", a)
	}
	if len(all[ToRank](effs))+len(all[Gossip](effs))+len(all[AskShards](effs)) != 0 || w.n.local.Len() != 1 {
		t.Fatalf("retry added: %v (tracked %d)", effs, w.n.local.Len())
	}
	// Another prompt (a different partial last block, another model, or
	// a different full block) under the id is refused.
	otherBlock := req(70, "")
	otherBlock.TokenIds[1] = 7
	for _, r := range []*messages.RouteRequest{req(71, ""), req(70, "m"), otherBlock} {
		if a := one[Answer](t, w.step(&Route{Req: r})); a.Err.GetCode() != messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST {
			t.Fatalf("other prompt: %+v", a)
		}
	}
	// Freed, the id is decided afresh.
	w.step(Lifecycle{M: &messages.RequestLifecycle{RequestId: "a",
		Step: &messages.RequestLifecycle_Free{Free: &messages.FreeRequest{RequestId: "a"}}}})
	if a, effs := w.route(req(70, "")); a.Outcome != "routed" || len(all[Gossip](effs)) != 1 {
		t.Fatalf("after the free: %+v", a)
	}
}

// A call routed without assumed KV reuse (its sampled hashes are random
// draws, no sequence-hash chain was computed) is still recognised when
// retried, and another prompt under its id is not.
func TestNodeRetryWithoutAssumedReuse(t *testing.T) {
	w := newNodeWorld(t, nil, 1, 2)
	noReuse := false
	req := func(first uint32) *messages.RouteRequest {
		toks := tokens(70)
		toks[0] = first
		return &messages.RouteRequest{RequestId: "a", UpdateStates: true, TokenIds: toks, CancelToken: 9,
			RouterConfigOverride: &messages.RouterConfigOverride{AssumeKvReuse: &noReuse}}
	}
	first, _ := w.route(req(0))
	if a := one[Answer](t, w.step(&Route{Req: req(0), Caller: "retry"})); a.Outcome != "retried" ||
		RankOf(a.Reply.Worker) != RankOf(first.Reply.Worker) {
		t.Fatalf("retry: %+v", a)
	}
	if a := one[Answer](t, w.step(&Route{Req: req(5)})); a.Err.GetCode() != messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST {
		t.Fatalf("other first block: %+v", a)
	}
}

func TestNodeRoutedCallsAreBounded(t *testing.T) {
	w := newNodeWorld(t, nil, 1)
	for i := range 500 {
		id := string(rune('a'+i%26)) + string(rune('a'+i/26))
		w.route(&messages.RouteRequest{RequestId: id, UpdateStates: true, CancelToken: uint64(i + 1)})
		w.step(Lifecycle{M: &messages.RequestLifecycle{RequestId: id,
			Step: &messages.RequestLifecycle_Free{Free: &messages.FreeRequest{RequestId: id}}}})
	}
	if len(w.n.routed) > 64 {
		t.Fatalf("%d routed calls kept with nothing tracked", len(w.n.routed))
	}
}

func TestDisaggregatedReceiptPricesEveryCandidate(t *testing.T) {
	w := newNodeWorld(t, nil, 1, 2, 3)
	r := testRanks(1, 2, 3)
	r.Roles = map[kv.WorkerWithDpRank]kv.Role{rank(1): kv.RolePrefill, rank(2): kv.RoleDecode, rank(3): kv.RoleDecode}
	w.step(&RankTable{Ranks: r, Incarnation: func(kv.WorkerWithDpRank) (string, bool) { return "1", true }})
	req := &messages.RouteRequest{RequestId: "a", UpdateStates: true, TokenIds: tokens(4096)}
	qid := one[AskShards](t, w.step(&Route{Req: req, Caller: "c", Explain: true})).Query.QueryId
	a := one[Answer](t, w.step(Overlap{M: &messages.OverlapReply{QueryId: qid}}))
	rc := a.Receipt
	if rc == nil || rc.Disaggregation != "remote" || len(rc.Candidates) != 3 {
		t.Fatalf("receipt %+v", rc)
	}
	for _, c := range rc.Candidates {
		want := "decode"
		if c.Worker == rank(1).String() {
			want = "prefill"
		}
		if c.Phase != want || c.Cost == 0 || c.Terms.PrefillLoad+c.Terms.DecodeLoad+c.Terms.RequestLoad != c.Cost {
			t.Fatalf("candidate %+v: want phase %s and terms adding up to a cost", c, want)
		}
	}
	if rc.Prefill != rank(1).String() {
		t.Fatalf("prefill %q", rc.Prefill)
	}
}
