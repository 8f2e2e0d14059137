package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/scenario"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// TestScenarios runs a thin set of the scenario scripts
// (decide/testdata/scenarios, the language in its README) against a real
// router (Start, 2 shards), one per file. Every script runs against the
// decision itself, with a fake clock, in decide's TestScenarios; these
// exercise the driver around it: the fan-out to the shards and sequence
// actors and its replies, the effects carried out (adds, frees, the
// prefill hop, sessions), and the gossip published and applied. The
// runner knows every command, so any script can be named here.
func TestScenarios(t *testing.T) {
	for _, f := range scenario.Files(t, scenario.Dir, "prefix", "origins", "sticky", "disagg") {
		t.Run(scenario.Name(f), func(t *testing.T) {
			s := &scenarioRunner{t: t, routes: map[string]chan routeResult{}, results: map[string]routeResult{}}
			scenario.Run(t, f, s.run)
		})
	}
}

type routeResult struct {
	reply *messages.RouteReply
	err   error
}

type scenarioRunner struct {
	t         *testing.T
	l         *scenario.Line
	mutations []func(*Config)
	r         *Router
	routes    map[string]chan routeResult
	results   map[string]routeResult

	mu        sync.Mutex
	published []*messages.SequenceEvent
}

func (s *scenarioRunner) fail(format string, a ...any) {
	s.t.Helper()
	s.l.Fail(format, a...)
}

func (s *scenarioRunner) router() *Router {
	if s.r == nil {
		s.r = startRouter(s.t, func(c *Config) {
			c.Publish = func(ev *messages.SequenceEvent) {
				s.mu.Lock()
				s.published = append(s.published, ev)
				s.mu.Unlock()
			}
			for _, m := range s.mutations {
				m(c)
			}
		})
	}
	return s.r
}

func (s *scenarioRunner) run(l *scenario.Line) {
	s.l = l
	switch l.Cmd {
	case "config":
		s.config(l)
	case "worker":
		err := s.router().RegisterWorker(l.Heartbeat(), true)
		if refused := l.Args["refused"] == "true"; refused != errors.Is(err, ErrLimit) || (!refused && err != nil) {
			s.fail("register: %v, want refused=%v", err, refused)
		}
	case "remove_worker":
		s.router().RemoveWorker(kv.WorkerID(l.Num(l.Word(0))))
	case "condition":
		s.condition(l)
	case "store":
		storeChain(s.router(), l.Rank(l.Word(0)), l.Tokens())
		if err := s.router().Barrier(ctxT(s.t)); err != nil {
			s.fail("barrier: %v", err)
		}
	case "route":
		s.route(l)
	case "expect":
		s.expect(l)
	case "prefill_done", "free":
		s.lifecycle(l)
	case "peer_add", "peer_free":
		s.router().ApplyRemote(l.PeerEvent())
	case "drop_origin":
		s.router().DropOrigin(l.Word(0))
	case "sleep":
		time.Sleep(l.Dur(l.Word(0)))
	case "expect_tracked", "expect_queue", "expect_rank":
		s.expectState(l)
	case "expect_published":
		s.mu.Lock()
		defer s.mu.Unlock()
		l.CheckPublished(s.published)
	case "end_session":
		s.endSession(l)
	case "peer_session":
		s.router().ApplyRemote(l.PeerSession(time.Now()))
	case "expect_session":
		s.expectSession(l)
	default:
		s.fail("unknown command %q", l.Cmd)
	}
}

// condition sets or clears a worker's busy, unhealthy or draining
// condition: condition ID busy|unhealthy|draining on|off [ranks=0,1]
// [known=false] [changed=false].
func (s *scenarioRunner) condition(l *scenario.Line) {
	cond, ok := scenario.Conditions[l.Word(1)]
	if !ok {
		s.fail("unknown condition %q", l.Word(1))
	}
	var ranks []uint32
	if v, ok := l.Args["ranks"]; ok {
		for _, n := range l.Nums(v) {
			ranks = append(ranks, uint32(n))
		}
	}
	known, changed, err := s.router().SetWorkerCondition(ctxT(s.t), kv.WorkerID(l.Num(l.Word(0))), cond, l.Word(2) == "on", ranks, "scenario")
	if err != nil {
		s.fail("condition: %v", err)
	}
	if want := l.Args["known"] != "false"; known != want {
		s.fail("known %v, want %v", known, want)
	}
	if want, ok := l.Args["changed"]; ok && fmt.Sprint(changed) != want {
		s.fail("changed %v, want %s", changed, want)
	}
}

func (s *scenarioRunner) config(l *scenario.Line) {
	if s.r != nil {
		s.fail("config must come before the first command that starts the router")
	}
	for k, v := range l.Args {
		var m func(*Config)
		switch k {
		case "queue_threshold":
			f := l.Float(v)
			m = func(c *Config) { c.Scheduling.RouterQueueThreshold = f }
		case "max_queue_length":
			n := int(l.Num(v))
			m = func(c *Config) { c.Scheduling.MaxQueueLength = n }
		case "max_queue_wait":
			d := l.Dur(v)
			m = func(c *Config) { c.MaxQueueWait = d }
		case "max_workers":
			n := int(l.Num(v))
			m = func(c *Config) { c.MaxWorkers = n }
		case "max_ranks":
			n := int(l.Num(v))
			m = func(c *Config) { c.MaxRanks = n }
		case "max_prompt_tokens":
			n := int(l.Num(v))
			m = func(c *Config) { c.Limits.MaxPromptTokens = n }
		case "max_request_id_bytes":
			n := int(l.Num(v))
			m = func(c *Config) { c.Limits.MaxRequestIDBytes = n }
		case "max_active_requests":
			n := int(l.Num(v))
			m = func(c *Config) { c.Limits.MaxActiveRequests = n }
		case "stale_expiry":
			d := l.Dur(v)
			m = func(c *Config) { c.Sequence.ExpiryDuration = d }
		case "replica":
			m = func(c *Config) { c.ReplicaID = v }
		case "stride":
			n := int(l.Num(v))
			m = func(c *Config) { c.Sequence.Stride = n }
		case "drain_grace":
			d := l.Dur(v)
			m = func(c *Config) { c.DrainGrace = d }
		case "router_cost":
			cost, err := scheduling.ParseCostModel(v)
			if err != nil {
				s.fail("%v", err)
			}
			m = func(c *Config) { c.Scheduling.RouterCost = cost }
		case "session_ttl":
			d := l.Dur(v)
			m = func(c *Config) { c.Sessions.TTL = d }
		case "max_sessions":
			n := int(l.Num(v))
			m = func(c *Config) { c.Sessions.MaxSessions = n }
		case "max_session_id_bytes":
			n := int(l.Num(v))
			m = func(c *Config) { c.Sessions.MaxIDBytes = n }
		case "max_local_prefill_length":
			n := l.Num(v)
			m = func(c *Config) { c.Scheduling.MaxLocalPrefillLength = n }
		case "prefill_tokens_per_sec":
			f := l.Float(v)
			m = func(c *Config) { c.Scheduling.TTFT.PrefillTokensPerSec = f }
		default:
			s.fail("unknown config key %q", k)
		}
		s.mutations = append(s.mutations, m)
	}
}

func (s *scenarioRunner) route(l *scenario.Line) {
	id, req := l.Word(0), l.Request()
	ch := make(chan routeResult, 1)
	s.routes[id] = ch
	r := s.router()
	timeout := 10 * time.Second
	if v, ok := l.Args["timeout"]; ok {
		timeout = l.Dur(v) // the client leaves after this long
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		reply, err := r.Route(ctx, req)
		ch <- routeResult{reply, err}
	}()
	if l.Args["wait"] != "false" {
		// Unless told otherwise, a route is answered (or parked) before the
		// next line runs: give the scheduler the request first.
		s.settle(id)
	}
}

// settle waits until the route answered or the scheduler has seen it (it
// is then queued or its fan-out is under way).
func (s *scenarioRunner) settle(id string) {
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case res := <-s.routes[id]:
			s.results[id] = res
			delete(s.routes, id)
			return
		case <-time.After(5 * time.Millisecond):
		}
		if reg, err := s.router().Registry(ctxT(s.t)); err == nil && reg.QueueDepth > 0 && s.queued(id) {
			return
		}
	}
}

// queued reports whether the route is still unanswered after a short
// grace: with one request in flight per scenario step this means parked.
func (s *scenarioRunner) queued(id string) bool {
	select {
	case res := <-s.routes[id]:
		s.results[id] = res
		delete(s.routes, id)
		return false
	case <-time.After(20 * time.Millisecond):
		return true
	}
}

// result waits for a route's answer (up to 5 s).
func (s *scenarioRunner) result(id string) routeResult {
	if res, ok := s.results[id]; ok {
		return res
	}
	ch, ok := s.routes[id]
	if !ok {
		s.fail("no route %q", id)
	}
	select {
	case res := <-ch:
		s.results[id] = res
		delete(s.routes, id)
		return res
	case <-time.After(5 * time.Second):
		s.fail("route %q not answered in 5s", id)
	}
	return routeResult{}
}

// errorKind names a route call's error as the scripts do.
func errorKind(err error) string {
	for kind, e := range map[string]error{"overloaded": ErrOverloaded, "no_worker": ErrNoEligibleWorker, "bad_request": ErrBadRequest,
		"limit": ErrLimit, "client_left": context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return kind
		}
	}
	return "none"
}

func (s *scenarioRunner) expect(l *scenario.Line) {
	id := l.Word(0)
	if l.Args["pending"] == "true" {
		if _, done := s.results[id]; done || !s.queued(id) {
			s.fail("route %q was answered, want it still pending: %+v", id, s.results[id])
		}
		return
	}
	res := s.result(id)
	if _, ok := l.Args["error"]; ok {
		msg := fmt.Sprint(res.err)
		l.CheckError(errorKind(res.err), msg)
		return
	}
	if res.err != nil {
		s.fail("route failed: %v", res.err)
	}
	l.CheckReply(res.reply, func(other string) (kv.WorkerWithDpRank, bool) {
		if o := s.result(other); o.err == nil {
			return rankOf(o.reply.Worker), true
		}
		return kv.WorkerWithDpRank{}, false
	})
}

func (s *scenarioRunner) lifecycle(l *scenario.Line) {
	var err error
	id := l.Word(0)
	if l.Cmd == "free" {
		err = s.router().Free(ctxT(s.t), id)
	} else {
		err = s.router().MarkPrefillCompleted(ctxT(s.t), id)
	}
	wantMissing := l.Args["missing"] == "true"
	if wantMissing != errors.Is(err, ErrUnknownRequest) || (!wantMissing && err != nil) {
		s.fail("%s %s: err %v, want missing=%v", l.Cmd, id, err, wantMissing)
	}
}

// expectState polls the router's status until it matches (state changes
// travel through mailboxes) and fails after 3 s.
func (s *scenarioRunner) expectState(l *scenario.Line) {
	var last string
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		st, err := s.router().Status(ctxT(s.t), false)
		if err != nil {
			s.fail("status: %v", err)
		}
		var ok bool
		ok, last = s.stateMatches(l, st)
		if ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.fail("state never matched; last: %s", last)
}

func (s *scenarioRunner) stateMatches(l *scenario.Line, st *Status) (bool, string) {
	switch l.Cmd {
	case "expect_tracked":
		return st.TrackedRequests == l.Num(l.Word(0)), fmt.Sprint("tracked ", st.TrackedRequests)
	case "expect_queue":
		return uint64(st.QueueDepth) == l.Num(l.Word(0)), fmt.Sprint("queue ", st.QueueDepth)
	}
	w := l.Rank(l.Word(0))
	registered := false
	for _, ws := range st.Workers {
		registered = registered || ws.WorkerID == uint64(w.WorkerID)
	}
	if l.Args["registered"] == "false" {
		return !registered, "still registered"
	}
	for _, ws := range st.Workers {
		for _, rs := range ws.Ranks {
			if ws.WorkerID == uint64(w.WorkerID) && rs.DpRank == w.DpRank {
				return l.RankMatches(uint64(rs.ActiveRequests), rs.ActivePrefillTokens, rs.State)
			}
		}
	}
	return false, "rank not registered"
}

// endSession: end_session ID [missing=true] [bad=true] (an id the table
// refuses: bad_request).
func (s *scenarioRunner) endSession(l *scenario.Line) {
	id := l.Word(0)
	found, err := s.router().EndSession(ctxT(s.t), id)
	if l.Args["bad"] == "true" {
		if !errors.Is(err, ErrBadRequest) {
			s.fail("end_session %s: %v, want bad_request", id, err)
		}
		return
	}
	if err != nil {
		s.fail("end_session %s: %v", id, err)
	}
	if want := l.Args["missing"] != "true"; found != want {
		s.fail("end_session %s: found %v, want %v", id, found, want)
	}
}

// expectSession: the session table as a snapshot shows it (polled: peers'
// writes travel through mailboxes).
func (s *scenarioRunner) expectSession(l *scenario.Line) {
	id := l.Word(0)
	var last string
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		evs, err := s.router().SessionSnapshot(ctxT(s.t))
		if err != nil {
			s.fail("session snapshot: %v", err)
		}
		bound, worker := false, kv.WorkerWithDpRank{}
		for _, ev := range evs {
			if b := ev.GetSessionBound(); b != nil && b.SessionId == id {
				bound, worker = true, rankOf(b.Worker)
			}
		}
		var ok bool
		if ok, last = l.SessionMatches(bound, worker, len(evs)); ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.fail("session %s never matched; last: %s", id, last)
}
