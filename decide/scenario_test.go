package decide_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/internal/scenario"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/registry"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sequence"
	"github.com/kvrouter/kvrouter/sessions"
	"github.com/kvrouter/kvrouter/tracking"
)

// TestScenarios runs every scenario script (testdata/scenarios, the
// language in its README) against the scheduler's state machine (Node)
// with a fake clock. The world around it is made of the pure parts the
// other actors own in a router: the registry, one index (one shard), each
// rank's active sequences and prefill rate, the replication edge's table
// of peers' requests, and the gossip published. The world carries out the
// Node's effects as the scheduler actor does, and what they cause comes
// back as inputs in order, as through a mailbox; time passes only when a
// script sleeps or an expectation waits for a change (in ticks of
// worldTick).
func TestScenarios(t *testing.T) {
	for _, f := range scenario.Files(t, "testdata/scenarios") {
		t.Run(scenario.Name(f), func(t *testing.T) {
			w := newWorld()
			scenario.Run(t, f, w.step)
		})
	}
}

const (
	blockSize = 16
	worldTick = 10 * time.Millisecond
	// waitFor bounds how long an expectation lets the fake clock run.
	waitFor = 5 * time.Second
)

// world is a router's state as the actors hold it, stepped in one
// goroutine.
type world struct {
	l       *scenario.Line
	cfg     worldConfig
	started bool
	now     time.Time

	node  *decide.Node
	reg   *registry.Registry[*messages.WorkerHeartbeat]
	idx   *index.Indexer
	ranks map[kv.WorkerWithDpRank]*rankSim
	view  *decide.Ranks
	gen   int // names each rank's sequences (a re-registered rank is new)

	remote    *tracking.Table // the replication edge's
	published []*messages.SequenceEvent

	routes     map[string]*route // the last route of each id
	open       map[*route]bool   // routes not answered yet
	nextToken  uint64
	inbox      []decide.Input // what the effects caused, in order
	responded  any            // the last Respond
	replicated bool           // the last step was handed to the replication edge
}

type worldConfig struct {
	sched                    scheduling.Config
	limits                   scheduling.Limits
	seq                      sequence.Config
	sess                     sessions.Config
	maxQueueWait, drainGrace time.Duration
	maxWorkers, maxRanks     int
	replica                  string
}

// The router's defaults (actors.DefaultConfig) that the scripts rely on.
func newWorld() *world {
	return &world{cfg: worldConfig{
		sched: scheduling.DefaultConfig(), limits: scheduling.DefaultLimits(), seq: sequence.DefaultConfig(),
		sess:         sessions.Config{TTL: sessions.DefaultTTL, MaxSessions: sessions.DefaultMaxSessions, MaxIDBytes: sessions.DefaultMaxIDBytes},
		maxQueueWait: 60 * time.Second, drainGrace: 30 * time.Second, maxWorkers: 10000, maxRanks: 32768, replica: "local",
	}, now: time.Unix(1_700_000_000, 0)}
}

// rankSim is a rank's sequence actor: its active sequences, its measured
// prefill rate, and how many of this replica's adds it applied.
type rankSim struct {
	w       kv.WorkerWithDpRank
	name    string
	seqs    *sequence.ActiveSequences
	rate    scheduling.PrefillRate
	applied uint64
}

type route struct {
	req     *messages.RouteRequest
	leaveAt time.Time // the client leaves (zero: never)
	done    bool
	reply   *messages.RouteReply
	err     *messages.RouteError
}

func (w *world) fail(format string, a ...any) {
	w.l.T.Helper()
	w.l.Fail(format, a...)
}

func (w *world) start() {
	if w.started {
		return
	}
	w.started = true
	c := w.cfg
	c.sess.ReplicaID = c.replica
	n, err := decide.NewNode(decide.NodeConfig{Decider: decide.Config{Scheduling: c.sched, Limits: c.limits, BlockSize: blockSize,
		Stride: c.seq.EffectiveStride(), TrackActiveBlocks: true, MaxQueueWait: c.maxQueueWait}, Seed: [2]uint64{1, 2},
		Sessions: c.sess, Replica: c.replica, Shards: 1, DecisionTimeout: time.Second, KVEvents: true})
	if err != nil {
		w.fail("node: %v", err)
	}
	w.node = n
	w.reg = registry.New[*messages.WorkerHeartbeat](8192, registry.Limits{MaxWorkers: c.maxWorkers, MaxRanks: c.maxRanks})
	w.idx = index.New()
	w.ranks = map[kv.WorkerWithDpRank]*rankSim{}
	w.remote = tracking.New()
	w.routes, w.open = map[string]*route{}, map[*route]bool{}
	w.publishTable()
}

func (w *world) step(l *scenario.Line) {
	w.l = l
	if l.Cmd != "config" {
		w.start()
	}
	a := l.Args
	switch l.Cmd {
	case "config":
		w.config(l)
	case "worker":
		w.worker(l)
	case "remove_worker":
		w.removeWorker(kv.WorkerID(l.Num(l.Word(0))))
	case "condition":
		w.condition(l)
	case "store":
		w.store(l.Rank(l.Word(0)), l.Tokens())
	case "route":
		w.route(l)
	case "expect":
		w.expect(l)
	case "prefill_done", "free":
		found := w.lifecycle(l.Word(0), l.Cmd == "free")
		if want := a["missing"] != "true"; found != want {
			w.fail("%s %s: found %v, want %v", l.Cmd, l.Word(0), found, want)
		}
	case "peer_add", "peer_free":
		w.peer(l.PeerEvent())
	case "drop_origin":
		w.dropOrigin(l.Word(0))
	case "sleep":
		w.advance(l.Dur(l.Word(0)))
	case "expect_tracked", "expect_queue", "expect_rank":
		w.await(func() (bool, string) { return w.state(l) })
	case "expect_published":
		l.CheckPublished(w.published)
	case "end_session":
		w.endSession(l)
	case "peer_session":
		w.peerSession(l)
	case "expect_session":
		w.await(func() (bool, string) { return w.session(l) })
	default:
		w.fail("unknown command %q", l.Cmd)
	}
}

func (w *world) config(l *scenario.Line) {
	if w.started {
		w.fail("config must come before the first command that starts the router")
	}
	c := &w.cfg
	for k, v := range l.Args {
		switch k {
		case "queue_threshold":
			c.sched.RouterQueueThreshold = l.Float(v)
		case "max_queue_length":
			c.sched.MaxQueueLength = int(l.Num(v))
		case "max_queue_wait":
			c.maxQueueWait = l.Dur(v)
		case "max_workers":
			c.maxWorkers = int(l.Num(v))
		case "max_ranks":
			c.maxRanks = int(l.Num(v))
		case "max_prompt_tokens":
			c.limits.MaxPromptTokens = int(l.Num(v))
		case "max_request_id_bytes":
			c.limits.MaxRequestIDBytes = int(l.Num(v))
		case "max_active_requests":
			c.limits.MaxActiveRequests = int(l.Num(v))
		case "stale_expiry":
			c.seq.ExpiryDuration = l.Dur(v)
		case "replica":
			c.replica = v
		case "stride":
			c.seq.Stride = int(l.Num(v))
		case "drain_grace":
			c.drainGrace = l.Dur(v)
		case "router_cost":
			m, err := scheduling.ParseCostModel(v)
			if err != nil {
				w.fail("%v", err)
			}
			c.sched.RouterCost = m
		case "prefill_tokens_per_sec":
			c.sched.TTFT.PrefillTokensPerSec = l.Float(v)
		case "session_ttl":
			c.sess.TTL = l.Dur(v)
		case "max_sessions":
			c.sess.MaxSessions = int(l.Num(v))
		case "max_session_id_bytes":
			c.sess.MaxIDBytes = int(l.Num(v))
		case "max_local_prefill_length":
			c.sched.MaxLocalPrefillLength = l.Num(v)
		default:
			w.fail("unknown config key %q", k)
		}
	}
}

// ---- time ----

// advance lets d pass on the fake clock, a tick at a time.
func (w *world) advance(d time.Duration) {
	for end := w.now.Add(d); w.now.Before(end); {
		w.now = w.now.Add(worldTick)
		w.tick()
	}
}

// tick is what the actors do as time passes: clients that leave, queue
// waits, idle sessions, drained workers and stale requests.
func (w *world) tick() {
	for r := range w.open {
		if !r.leaveAt.IsZero() && !w.now.Before(r.leaveAt) {
			w.feed(decide.Cancel{M: &messages.CancelRoute{CancelToken: r.req.CancelToken, RequestId: r.req.RequestId}})
		}
	}
	w.feed(decide.Tick{})
	for _, id := range w.reg.DrainExpired(w.now, w.cfg.drainGrace) {
		w.removeWorker(id)
	}
	for _, rk := range w.ranks {
		expired := rk.seqs.ExpireStale(w.now)
		for _, id := range expired {
			w.remote.Untrack(id)
		}
		if len(expired) > 0 {
			w.feed(&decide.StaleFreed{IDs: expired})
			w.publishLoad(rk, false)
		}
	}
}

// await lets the clock run until ok holds (the actors' expectations poll
// while messages travel; here only time can change anything).
func (w *world) await(ok func() (bool, string)) {
	w.l.T.Helper()
	var last string
	for end := w.now.Add(waitFor); ; w.advance(worldTick) {
		var done bool
		if done, last = ok(); done {
			return
		}
		if !w.now.Before(end) {
			break
		}
	}
	w.fail("never matched; last: %s", last)
}

// ---- the registry ----

func (w *world) worker(l *scenario.Line) {
	hb := l.Heartbeat()
	role := kv.Role(hb.Role)
	shape := registry.Shape{DpStart: hb.DataParallelStartRank, DpSize: hb.DataParallelSize, MaxNumBatchedTokens: hb.MaxNumBatchedTokens, Role: role}
	ch, err := w.reg.Upsert(kv.WorkerID(hb.WorkerId), shape, hb, true, w.now)
	if refused := l.Args["refused"] == "true"; refused != (err != nil) {
		w.fail("register: %v, want refused=%v", err, refused)
	}
	if err == nil {
		w.applyChange(ch)
	}
}

func (w *world) removeWorker(id kv.WorkerID) {
	ch, ok := w.reg.Remove(id)
	if !ok {
		return
	}
	w.idx.RemoveWorker(id)
	w.applyChange(ch)
}

// applyChange drops the sequences of removed ranks (their requests go
// with them), starts those of added ranks and publishes the rank table.
func (w *world) applyChange(ch registry.Change) {
	for _, r := range ch.Removed {
		delete(w.ranks, r)
	}
	for _, r := range ch.Added {
		w.gen++
		w.ranks[r] = &rankSim{w: r, name: fmt.Sprint(w.gen), seqs: sequence.New(w.cfg.seq)}
	}
	w.publishTable()
}

func (w *world) condition(l *scenario.Line) {
	id, on := kv.WorkerID(l.Num(l.Word(0))), l.Word(2) == "on"
	var changed, known bool
	switch scenario.Conditions[l.Word(1)] {
	case kv.WorkerBusy:
		var ranks []uint32
		if v, ok := l.Args["ranks"]; ok {
			for _, n := range l.Nums(v) {
				ranks = append(ranks, uint32(n))
			}
		}
		changed, known = w.reg.SetBusy(id, on, ranks)
	case kv.WorkerUnhealthy:
		changed, known = w.reg.SetUnhealthy(id, on)
	case kv.WorkerDraining:
		changed, known = w.reg.SetDraining(id, on, w.now)
	default:
		w.fail("unknown condition %q", l.Word(1))
	}
	if want := l.Args["known"] != "false"; known != want {
		w.fail("known %v, want %v", known, want)
	}
	if want, ok := l.Args["changed"]; ok && fmt.Sprint(changed) != want {
		w.fail("changed %v, want %s", changed, want)
	}
	if changed {
		w.publishTable()
	}
}

// publishTable is the registry's rank table reaching the scheduler and
// the replication edge.
func (w *world) publishTable() {
	v := &decide.Ranks{List: append([]kv.WorkerWithDpRank(nil), w.reg.Ranks()...), Budgets: map[kv.WorkerID]uint64{}}
	v.Has = func(r kv.WorkerWithDpRank) bool { _, ok := w.ranks[r]; return ok }
	for _, r := range v.List {
		v.Budgets[r.WorkerID] = w.reg.Budget(r.WorkerID)
		if info, _ := w.reg.Info(r.WorkerID); info != nil && info.TotalKvBlocks > 0 {
			if v.Capacity == nil {
				v.Capacity = map[kv.WorkerWithDpRank]uint64{}
			}
			v.Capacity[r] = info.TotalKvBlocks
		}
		if role := w.reg.Role(r.WorkerID); role != kv.RoleBoth {
			if v.Roles == nil {
				v.Roles = map[kv.WorkerWithDpRank]kv.Role{}
			}
			v.Roles[r] = role
		}
		if st := w.reg.State(r); st != kv.WorkerActive {
			if v.States == nil {
				v.States = map[kv.WorkerWithDpRank]kv.WorkerState{}
			}
			v.States[r] = st
		}
	}
	w.view = v
	name := func(r kv.WorkerWithDpRank) (string, bool) {
		if rk, ok := w.ranks[r]; ok {
			return rk.name, true
		}
		return "", false
	}
	w.feed(&decide.RankTable{Ranks: v, Incarnation: name})
	w.remote.DropUnregistered(v.Has)
}

// ---- the ranks' sequences ----

// publishLoad is a rank's publication reaching the scheduler's board.
func (w *world) publishLoad(rk *rankSim, full bool) {
	l := rk.seqs.Load()
	m := &messages.RankLoad{Worker: decide.RankMsg(rk.w), ActivePrefillTokens: l.ActivePrefillTokens, ActiveBlocks: l.ActiveBlocks,
		ActiveRequests: uint32(l.ActiveRequests), PrefillTokensPerSec: rk.rate.TokensPerSec(), AddsApplied: rk.applied, Full: full}
	if tokens, added, ok := rk.seqs.HeadPrefill(); ok {
		m.HeadPrefillTokens, m.HeadStartedUnixNano = tokens, rk.rate.HeadStart(added).UnixNano()
	}
	added, removed := rk.seqs.TakeRootChanges()
	if full {
		added, removed = rk.seqs.Roots(), nil
	}
	for _, h := range added {
		m.RootsAdded = append(m.RootsAdded, uint64(h))
	}
	for _, h := range removed {
		m.RootsRemoved = append(m.RootsRemoved, uint64(h))
	}
	w.feed(decide.RankLoad{M: m})
}

func (w *world) add(rk *rankSim, m *messages.AddRequest, origin string) {
	r := sequence.Request{ID: m.RequestId, Origin: origin, SequenceHashes: kv.AsSequenceHashes(m.SequenceHashes),
		PromptBlocks: uint64(m.PromptBlocks), ISL: m.Isl, PrefillTokens: m.PrefillTokens, TrackPrefill: m.TrackPrefillTokens,
		ExpectedOutputTokens: m.ExpectedOutputTokens}
	if origin == w.cfg.replica {
		rk.applied++
		r.Lease = w.cfg.seq.Lease.For(r.ISL, r.ExpectedOutputTokens, w.cfg.seq.ExpiryDuration)
	}
	if err := rk.seqs.AddRequest(r, w.now); err != nil && !errors.Is(err, sequence.ErrDuplicateRequest) {
		w.fail("add %s: %v", m.RequestId, err)
	}
	w.publishLoad(rk, false)
}

func (w *world) prefillDone(rk *rankSim, id string) {
	tokens, started, ok := rk.seqs.PrefillPending(id)
	_ = rk.seqs.MarkPrefillCompleted(id)
	if ok && tokens > 0 {
		rk.rate.Observe(tokens, started, w.now)
	}
	if ok {
		_, _ = rk.seqs.Renew(id, w.now, w.cfg.seq.Lease.AfterPrefill(rk.seqs.ExpectedOutput(id), w.cfg.seq.ExpiryDuration))
	}
	w.publishLoad(rk, false)
}

// apply carries a lifecycle step to a rank (free or prefill done) and
// gossips it when gossip is set.
func (w *world) apply(rk *rankSim, id string, free, gossip bool) {
	if rk != nil {
		if free {
			_ = rk.seqs.Free(id)
			w.publishLoad(rk, false)
		} else {
			w.prefillDone(rk, id)
		}
	}
	if !gossip {
		return
	}
	if free {
		w.gossip(&messages.SequenceEvent{Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: id}}})
	} else {
		w.gossip(&messages.SequenceEvent{Data: &messages.SequenceEvent_PrefillCompleted{
			PrefillCompleted: &messages.MarkPrefillCompleted{RequestId: id}}})
	}
}

func (w *world) store(r kv.WorkerWithDpRank, tokens []uint32) {
	local := hashing.BlockHashes(tokens, blockSize, hashing.Options{})
	seq := hashing.SequenceHashes(local)
	ev := &kv.Event{Worker: r, Kind: kv.EventStored}
	for i := range local {
		ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[i]), TokensHash: local[i]})
	}
	if err := w.idx.Apply(ev); err != nil {
		w.fail("store: %v", err)
	}
}

func (w *world) gossip(ev *messages.SequenceEvent) {
	ev.Origin, ev.Seq = w.cfg.replica, uint64(len(w.published)+1)
	w.published = append(w.published, ev)
}

// ---- the scheduler ----

func (w *world) route(l *scenario.Line) {
	req := l.Request()
	w.nextToken++
	req.CancelToken = w.nextToken
	r := &route{req: req}
	if v, ok := l.Args["timeout"]; ok {
		r.leaveAt = w.now.Add(l.Dur(v))
	}
	w.routes[req.RequestId] = r
	w.open[r] = true
	w.feed(&decide.Route{Req: req, Caller: r})
}

// feed steps the Node with in and carries out its effects, then steps it
// with what they caused (replies, publications), in order, until nothing
// is left: the scheduler's mailbox.
func (w *world) feed(in decide.Input) {
	w.inbox = append(w.inbox, in)
	if len(w.inbox) > 1 {
		return // an outer feed is draining the inbox
	}
	w.responded, w.replicated = nil, false
	for len(w.inbox) > 0 {
		next := w.inbox[0]
		for _, eff := range w.node.Step(w.now, next) {
			w.carryOut(eff)
		}
		w.inbox = w.inbox[1:]
	}
}

// carryOut is what the scheduler actor and the actors it sends to do
// with an effect.
func (w *world) carryOut(eff decide.Effect) {
	switch e := eff.(type) {
	case *decide.AskShards:
		packed, _ := decide.PackOverlaps(w.idx.FindMatches(kv.AsLocalHashes(e.Query.LocalHashes)), nil, nil)
		w.inbox = append(w.inbox, decide.Overlap{M: &messages.OverlapReply{QueryId: e.Query.QueryId, Ranks: packed}})
	case *decide.ToRank:
		w.toRank(w.ranks[e.Rank], e.Msg)
	case *decide.Gossip:
		w.gossip(e.Event)
	case *decide.Answer:
		if r, ok := e.To.(*route); ok {
			delete(w.open, r)
			r.done, r.reply, r.err = true, e.Reply, e.Err
		}
	case *decide.Respond:
		w.responded = e.Msg
	case *decide.ToReplication:
		w.replicated = true
	}
}

// toRank is a rank's sequence actor receiving msg.
func (w *world) toRank(rk *rankSim, msg any) {
	if rk == nil {
		return
	}
	switch m := msg.(type) {
	case *messages.LoadQuery:
		l := rk.seqs.Load()
		reply := &messages.LoadReply{QueryId: m.QueryId, Worker: decide.RankMsg(rk.w), ActivePrefillTokens: l.ActivePrefillTokens,
			ActiveBlocks: l.ActiveBlocks, ActiveRequests: uint32(l.ActiveRequests), PrefillTokensPerSec: rk.rate.TokensPerSec(),
			NewBlocks: sequence.CountNewBlocks(rk.seqs, m.SequenceHashes, uint64(m.PromptBlocks)), AddsApplied: rk.applied}
		if tokens, started, ok := rk.seqs.HeadPrefill(); ok {
			reply.HeadPrefillTokens, reply.HeadPrefillElapsedNanos = tokens, int64(rk.rate.HeadElapsed(started, w.now))
		}
		w.inbox = append(w.inbox, decide.Load{M: reply})
	case *messages.RankLoadQuery:
		// A new rank starts counting this replica's adds afresh and
		// publishes its full load.
		rk.applied = 0
		w.publishLoad(rk, true)
	case *messages.AddRequest:
		w.add(rk, m, w.cfg.replica)
	case *messages.FreeRequest:
		w.apply(rk, m.RequestId, true, false)
	case *messages.MarkPrefillCompleted:
		w.apply(rk, m.RequestId, false, false)
	case *messages.SequenceEvent: // a peer's step of our request
		w.apply(rk, decide.ChangeOf(m).RequestID, m.GetFree() != nil, false)
	}
}

// lifecycle frees a request or completes its prefill, as a client does
// through this replica: the scheduler's own requests, else a peer's (the
// replication edge).
func (w *world) lifecycle(id string, free bool) bool {
	m := &messages.RequestLifecycle{RequestId: id,
		Step: &messages.RequestLifecycle_PrefillCompleted{PrefillCompleted: &messages.MarkPrefillCompleted{RequestId: id}}}
	if free {
		m.Step = &messages.RequestLifecycle_Free{Free: &messages.FreeRequest{RequestId: id}}
	}
	w.feed(decide.Lifecycle{M: m})
	if !w.replicated {
		r, _ := w.responded.(*messages.LifecycleReply)
		return r.GetFound()
	}
	e, ok := w.remote.Lookup(id)
	rk := w.ranks[e.Rank]
	if !ok || rk == nil {
		return false
	}
	if free {
		w.remote.Untrack(id)
	}
	w.apply(rk, id, free, true)
	return true
}

// peer applies a peer's gossiped add or free (the replication edge).
func (w *world) peer(ev *messages.SequenceEvent) {
	c := decide.ChangeOf(ev)
	rw, out := w.remote.ApplyRemote(c, w.cfg.replica, w.cfg.seq.EffectiveStride(), w.view.Has)
	switch {
	case out == tracking.Apply && c.Step == tracking.StepAdd:
		w.add(w.ranks[rw], ev.GetAdd(), ev.Origin)
	case out == tracking.Apply:
		w.apply(w.ranks[rw], c.RequestID, true, false)
	case out == tracking.NotTracked && c.Step != tracking.StepAdd:
		// Perhaps a request this replica routed, finished by a client
		// through the peer: the scheduler owns those.
		w.feed(decide.PeerStep{M: ev})
	}
}

func (w *world) dropOrigin(origin string) {
	if origin == w.cfg.replica {
		return
	}
	w.remote.DropOrigin(origin)
	for _, rk := range w.ranks {
		if len(rk.seqs.FreeOrigin(origin)) > 0 {
			w.publishLoad(rk, false)
		}
	}
}

// ---- sessions ----

func (w *world) endSession(l *scenario.Line) {
	id := l.Word(0)
	w.feed(decide.EndSession{M: &messages.EndSession{SessionId: id}})
	r, _ := w.responded.(*messages.EndSessionReply)
	if bad := r.GetError() != ""; bad != (l.Args["bad"] == "true") {
		w.fail("end_session %s: error %q, want bad=%v", id, r.GetError(), l.Args["bad"] == "true")
	}
	if r.GetError() != "" {
		return
	}
	if want := l.Args["missing"] != "true"; r.GetFound() != want {
		w.fail("end_session %s: found %v, want %v", id, r.GetFound(), want)
	}
}

func (w *world) peerSession(l *scenario.Line) {
	// A refused write is dropped (and counted).
	w.feed(&decide.SessionUpdates{Events: []*messages.SequenceEvent{l.PeerSession(w.now)}})
}

func (w *world) session(l *scenario.Line) (bool, string) {
	id := l.Word(0)
	w.feed(decide.SessionSnapshotQuery{})
	t, _ := w.responded.(*messages.SessionTable)
	bound, worker := false, kv.WorkerWithDpRank{}
	for _, ev := range t.GetEntries() {
		if e, ok := decide.SessionEntry(ev); ok && e.ID == id && !e.Ended {
			bound, worker = true, e.Worker
		}
	}
	return l.SessionMatches(bound, worker, len(t.GetEntries()))
}

// ---- expectations ----

func (w *world) expect(l *scenario.Line) {
	id, a := l.Word(0), l.Args
	r := w.routes[id]
	if r == nil {
		w.fail("no route %q", id)
	}
	if a["pending"] == "true" {
		if r.done {
			w.fail("route %q was answered, want it still pending: %v %v", id, r.reply, r.err)
		}
		return
	}
	w.await(func() (bool, string) { return r.done, "route " + id + " not answered" })
	if _, ok := a["error"]; ok {
		l.CheckError(errorKind(r.err), r.err.GetMessage())
		return
	}
	if r.err != nil {
		w.fail("route failed: %v", r.err)
	}
	l.CheckReply(r.reply, func(id string) (kv.WorkerWithDpRank, bool) {
		if o := w.routes[id]; o != nil && o.reply != nil {
			return decide.RankOf(o.reply.Worker), true
		}
		return kv.WorkerWithDpRank{}, false
	})
}

// errorKind names a route error as the scripts do.
func errorKind(e *messages.RouteError) string {
	switch e.GetCode() {
	case messages.RouteErrorCode_ROUTE_ERROR_OVERLOADED:
		return "overloaded"
	case messages.RouteErrorCode_ROUTE_ERROR_NO_ELIGIBLE_WORKER:
		return "no_worker"
	case messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST:
		return "bad_request"
	case messages.RouteErrorCode_ROUTE_ERROR_LIMIT, messages.RouteErrorCode_ROUTE_ERROR_CLIENT_LIMIT:
		return "limit"
	case messages.RouteErrorCode_ROUTE_ERROR_CANCELLED:
		return "client_left"
	}
	return "none"
}

func (w *world) state(l *scenario.Line) (bool, string) {
	a := l.Args
	switch l.Cmd {
	case "expect_tracked":
		w.feed(decide.TrackedQuery{})
		n := w.responded.(*messages.TrackedReply).TrackedRequests + uint64(w.remote.Len())
		return n == l.Num(l.Word(0)), fmt.Sprint("tracked ", n)
	case "expect_queue":
		q := w.node.Decider().QueueLen()
		return uint64(q) == l.Num(l.Word(0)), fmt.Sprint("queue ", q)
	}
	r := l.Rank(l.Word(0))
	rk := w.ranks[r]
	if a["registered"] == "false" {
		return !w.hasWorker(r.WorkerID), "still registered"
	}
	if rk == nil {
		return false, "rank not registered"
	}
	load := rk.seqs.Load()
	return l.RankMatches(uint64(load.ActiveRequests), load.ActivePrefillTokens, w.reg.State(r).String())
}

func (w *world) hasWorker(id kv.WorkerID) bool {
	_, ok := w.reg.Info(id)
	return ok
}
