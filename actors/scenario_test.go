package actors

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// TestScenarios runs the scheduler's rules as data (testdata/scenarios/
// *.txt), one real router per file. Each line is a command; see
// testdata/scenarios/README for the language. A failing line is reported
// with its file and line number.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios found: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScenario(t, f) })
	}
}

type routeResult struct {
	reply *messages.RouteReply
	err   error
}

type scenario struct {
	t         *testing.T
	where     string
	mutations []func(*Config)
	r         *Router
	routes    map[string]chan routeResult
	results   map[string]routeResult

	mu        sync.Mutex
	published []*messages.SequenceEvent
}

func runScenario(t *testing.T, path string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := &scenario{t: t, routes: map[string]chan routeResult{}, results: map[string]routeResult{}}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s.where = fmt.Sprintf("%s:%d: %s", filepath.Base(path), n, line)
		fields := strings.Fields(line)
		s.run(fields[0], fields[1:], args(fields[1:]))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func (s *scenario) fail(format string, a ...any) {
	s.t.Helper()
	s.t.Fatalf("%s\n\t%s", s.where, fmt.Sprintf(format, a...))
}

// args parses key=value words; positional words are left to the command.
func args(words []string) map[string]string {
	out := map[string]string{}
	for _, w := range words {
		if k, v, ok := strings.Cut(w, "="); ok {
			out[k] = v
		}
	}
	return out
}

func (s *scenario) router() *Router {
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

func (s *scenario) num(v string) uint64 {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		s.fail("bad number %q", v)
	}
	return n
}

func (s *scenario) dur(v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		s.fail("bad duration %q", v)
	}
	return d
}

func (s *scenario) rank(v string) kv.WorkerWithDpRank {
	w, dp, _ := strings.Cut(v, "/")
	if dp == "" {
		dp = "0"
	}
	return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(s.num(w)), DpRank: uint32(s.num(dp))}
}

// tokens is a named prompt: the same name always gives the same tokens,
// so a shorter use is a prefix of a longer one.
func (s *scenario) tokens(a map[string]string) []uint32 {
	h := fnv.New32a()
	h.Write([]byte(a["prompt"]))
	return prompt(int(s.num(a["tokens"])), h.Sum32()%40000)
}

func (s *scenario) run(cmd string, words []string, a map[string]string) {
	switch cmd {
	case "config":
		s.config(a)
	case "worker":
		hb := &messages.WorkerHeartbeat{WorkerId: s.num(words[0]), DataParallelSize: 1}
		if v, ok := a["dp"]; ok {
			hb.DataParallelSize = uint32(s.num(v))
		}
		if v, ok := a["start"]; ok {
			hb.DataParallelStartRank = uint32(s.num(v))
		}
		if v, ok := a["budget"]; ok {
			hb.MaxNumBatchedTokens = s.num(v)
		}
		if v, ok := a["kv_blocks"]; ok {
			hb.TotalKvBlocks = s.num(v)
		}
		if v, ok := a["role"]; ok {
			role, err := kv.ParseRole(v)
			if err != nil {
				s.fail("%v", err)
			}
			hb.Role = messages.WorkerRole(role)
		}
		err := s.router().RegisterWorker(hb, true)
		if refused := a["refused"] == "true"; refused != errors.Is(err, ErrLimit) || (!refused && err != nil) {
			s.fail("register: %v, want refused=%v", err, refused)
		}
	case "remove_worker":
		s.router().RemoveWorker(kv.WorkerID(s.num(words[0])))
	case "condition":
		s.condition(words, a)
	case "store":
		storeChain(s.router(), s.rank(words[0]), s.tokens(a))
		if err := s.router().Barrier(ctxT(s.t)); err != nil {
			s.fail("barrier: %v", err)
		}
	case "route":
		s.route(words[0], a)
	case "expect":
		s.expect(words[0], a)
	case "prefill_done", "free":
		s.lifecycle(cmd, words[0], a)
	case "peer_add":
		w := s.rank(a["worker"])
		tokens := s.tokens(a)
		s.router().ApplyRemote(&messages.SequenceEvent{Origin: words[0], Data: &messages.SequenceEvent_Add{Add: &messages.AddRequest{
			RequestId: words[1], Worker: rankMsg(w), PrefillTokens: s.num(a["prefill"]), TrackPrefillTokens: true,
			Isl: uint64(len(tokens)), Stride: uint32(s.num(defaultTo(a["stride"], "1"))),
		}}})
	case "peer_free":
		s.router().ApplyRemote(&messages.SequenceEvent{Origin: words[0],
			Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: words[1]}}})
	case "drop_origin":
		s.router().DropOrigin(words[0])
	case "sleep":
		time.Sleep(s.dur(words[0]))
	case "expect_tracked", "expect_queue", "expect_rank":
		s.expectState(cmd, words, a)
	case "expect_published":
		s.expectPublished(words, a)
	case "end_session":
		s.endSession(words[0], a)
	case "peer_session":
		s.peerSession(words, a)
	case "expect_session":
		s.expectSession(words[0], a)
	default:
		s.fail("unknown command %q", cmd)
	}
}

// condition sets or clears a worker's busy, unhealthy or draining
// condition: condition ID busy|unhealthy|draining on|off [ranks=0,1]
// [known=false] [changed=false].
func (s *scenario) condition(words []string, a map[string]string) {
	if len(words) < 3 {
		s.fail("want: condition ID busy|unhealthy|draining on|off")
	}
	conds := map[string]kv.WorkerState{"busy": kv.WorkerBusy, "unhealthy": kv.WorkerUnhealthy, "draining": kv.WorkerDraining}
	cond, ok := conds[words[1]]
	if !ok {
		s.fail("unknown condition %q", words[1])
	}
	var ranks []uint32
	if v, ok := a["ranks"]; ok {
		for _, rk := range strings.Split(v, ",") {
			ranks = append(ranks, uint32(s.num(rk)))
		}
	}
	known, changed, err := s.router().SetWorkerCondition(ctxT(s.t), kv.WorkerID(s.num(words[0])), cond, words[2] == "on", ranks, "scenario")
	if err != nil {
		s.fail("condition: %v", err)
	}
	if want := a["known"] != "false"; known != want {
		s.fail("known %v, want %v", known, want)
	}
	if want, ok := a["changed"]; ok && fmt.Sprint(changed) != want {
		s.fail("changed %v, want %s", changed, want)
	}
}

func defaultTo(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func (s *scenario) config(a map[string]string) {
	if s.r != nil {
		s.fail("config must come before the first command that starts the router")
	}
	for k, v := range a {
		switch k {
		case "queue_threshold":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				s.fail("bad float %q", v)
			}
			s.mutations = append(s.mutations, func(c *Config) { c.Scheduling.RouterQueueThreshold = f })
		case "max_queue_length":
			n := int(s.num(v))
			s.mutations = append(s.mutations, func(c *Config) { c.Scheduling.MaxQueueLength = n })
		case "max_queue_wait":
			d := s.dur(v)
			s.mutations = append(s.mutations, func(c *Config) { c.MaxQueueWait = d })
		case "max_workers", "max_ranks":
			n := int(s.num(v))
			s.mutations = append(s.mutations, func(c *Config) {
				if k == "max_workers" {
					c.MaxWorkers = n
				} else {
					c.MaxRanks = n
				}
			})
		case "max_prompt_tokens", "max_request_id_bytes", "max_active_requests":
			n := int(s.num(v))
			s.mutations = append(s.mutations, func(c *Config) {
				switch k {
				case "max_prompt_tokens":
					c.Limits.MaxPromptTokens = n
				case "max_request_id_bytes":
					c.Limits.MaxRequestIDBytes = n
				default:
					c.Limits.MaxActiveRequests = n
				}
			})
		case "stale_expiry":
			d := s.dur(v)
			s.mutations = append(s.mutations, func(c *Config) { c.Sequence.ExpiryDuration = d })
		case "replica":
			s.mutations = append(s.mutations, func(c *Config) { c.ReplicaID = v })
		case "stride":
			n := int(s.num(v))
			s.mutations = append(s.mutations, func(c *Config) { c.Sequence.Stride = n })
		case "drain_grace":
			d := s.dur(v)
			s.mutations = append(s.mutations, func(c *Config) { c.DrainGrace = d })
		case "router_cost":
			m, err := scheduling.ParseCostModel(v)
			if err != nil {
				s.fail("%v", err)
			}
			s.mutations = append(s.mutations, func(c *Config) { c.Scheduling.RouterCost = m })
		case "session_ttl":
			d := s.dur(v)
			s.mutations = append(s.mutations, func(c *Config) { c.Sessions.TTL = d })
		case "max_sessions", "max_session_id_bytes":
			n := int(s.num(v))
			s.mutations = append(s.mutations, func(c *Config) {
				if k == "max_sessions" {
					c.Sessions.MaxSessions = n
				} else {
					c.Sessions.MaxIDBytes = n
				}
			})
		case "max_local_prefill_length":
			n := s.num(v)
			s.mutations = append(s.mutations, func(c *Config) { c.Scheduling.MaxLocalPrefillLength = n })
		case "prefill_tokens_per_sec":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				s.fail("bad float %q", v)
			}
			s.mutations = append(s.mutations, func(c *Config) { c.Scheduling.TTFT.PrefillTokensPerSec = f })
		default:
			s.fail("unknown config key %q", k)
		}
	}
}

func (s *scenario) route(id string, a map[string]string) {
	req := &messages.RouteRequest{RequestId: id, TokenIds: s.tokens(a), UpdateStates: a["update"] != "false", SessionId: a["session"]}
	if v, ok := a["pinned"]; ok {
		req.PinnedWorker = rankMsg(s.rank(v))
	}
	if v, ok := a["allowed"]; ok {
		for _, w := range strings.Split(v, ",") {
			req.AllowedWorkerIds = append(req.AllowedWorkerIds, s.num(w))
		}
	}
	if v, ok := a["jump"]; ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			s.fail("bad jump %q", v)
		}
		req.PriorityJump = f
	}
	ch := make(chan routeResult, 1)
	s.routes[id] = ch
	r := s.router()
	timeout := 10 * time.Second
	if v, ok := a["timeout"]; ok {
		timeout = s.dur(v) // the client leaves after this long
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		reply, err := r.Route(ctx, req)
		ch <- routeResult{reply, err}
	}()
	if a["wait"] != "false" {
		// Unless told otherwise, a route is answered (or parked) before the
		// next line runs: give the scheduler the request first.
		s.settle(id)
	}
}

// settle waits until the route answered or the scheduler has seen it (it
// is then queued or its fan-out is under way).
func (s *scenario) settle(id string) {
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
func (s *scenario) queued(id string) bool {
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
func (s *scenario) result(id string) routeResult {
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

func (s *scenario) expect(id string, a map[string]string) {
	if a["pending"] == "true" {
		if _, done := s.results[id]; done || !s.queued(id) {
			s.fail("route %q was answered, want it still pending: %+v", id, s.results[id])
		}
		return
	}
	res := s.result(id)
	if want, ok := a["error"]; ok {
		kinds := map[string]error{"overloaded": ErrOverloaded, "no_worker": ErrNoEligibleWorker, "bad_request": ErrBadRequest,
			"limit": ErrLimit, "client_left": context.DeadlineExceeded}
		if !errors.Is(res.err, kinds[want]) {
			s.fail("got %v / %v, want error %s", res.reply, res.err, want)
		}
		if c, ok := a["contains"]; ok && !strings.Contains(res.err.Error(), strings.ReplaceAll(c, "_", " ")) {
			s.fail("error %q does not contain %q", res.err, c)
		}
		return
	}
	if res.err != nil {
		s.fail("route failed: %v", res.err)
	}
	got := rankOf(res.reply.Worker)
	if v, ok := a["worker"]; ok && got != s.rank(v) {
		s.fail("routed to %v, want %v", got, s.rank(v))
	}
	if v, ok := a["not_worker"]; ok && got == s.rank(v) {
		s.fail("routed to %v, which it must avoid", got)
	}
	if v, ok := a["apart_from"]; ok {
		if other := s.result(v); other.err == nil && rankOf(other.reply.Worker) == got {
			s.fail("routed to %v like %s, want another rank", got, v)
		}
	}
	if v, ok := a["overlap"]; ok && uint64(res.reply.OverlapBlocks) != s.num(v) {
		s.fail("overlap %d, want %s", res.reply.OverlapBlocks, v)
	}
	pf := res.reply.PrefillWorker
	if v, ok := a["prefill"]; ok && (pf == nil || rankOf(pf) != s.rank(v)) {
		s.fail("prefill on %v, want %v", pf, s.rank(v))
	}
	if a["local"] == "true" && pf != nil {
		s.fail("prefill on %v, want it local to the decode worker", rankOf(pf))
	}
	if a["local"] == "false" && pf == nil {
		s.fail("prefilled locally on %v, want a remote prefill", got)
	}
	if v, ok := a["prefill_overlap"]; ok && uint64(res.reply.PrefillOverlapBlocks) != s.num(v) {
		s.fail("prefill overlap %d, want %s", res.reply.PrefillOverlapBlocks, v)
	}
}

func (s *scenario) lifecycle(cmd, id string, a map[string]string) {
	var err error
	if cmd == "free" {
		err = s.router().Free(ctxT(s.t), id)
	} else {
		err = s.router().MarkPrefillCompleted(ctxT(s.t), id)
	}
	wantMissing := a["missing"] == "true"
	if wantMissing != errors.Is(err, ErrUnknownRequest) || (!wantMissing && err != nil) {
		s.fail("%s %s: err %v, want missing=%v", cmd, id, err, wantMissing)
	}
}

// expectState polls the router's status until it matches (state changes
// travel through mailboxes) and fails after 3 s.
func (s *scenario) expectState(cmd string, words []string, a map[string]string) {
	var last string
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		st, err := s.router().Status(ctxT(s.t), false)
		if err != nil {
			s.fail("status: %v", err)
		}
		switch cmd {
		case "expect_tracked":
			last = fmt.Sprint("tracked ", st.TrackedRequests)
			if st.TrackedRequests == s.num(words[0]) {
				return
			}
		case "expect_queue":
			last = fmt.Sprint("queue ", st.QueueDepth)
			if uint64(st.QueueDepth) == s.num(words[0]) {
				return
			}
		case "expect_rank":
			w := s.rank(words[0])
			last = "rank not registered"
			if a["registered"] == "false" {
				found := false
				for _, ws := range st.Workers {
					found = found || ws.WorkerID == uint64(w.WorkerID)
				}
				if !found {
					return
				}
				last = "still registered"
				break
			}
			for _, ws := range st.Workers {
				for _, rs := range ws.Ranks {
					if ws.WorkerID != uint64(w.WorkerID) || rs.DpRank != w.DpRank {
						continue
					}
					last = fmt.Sprintf("requests %d prefill %d state %s", rs.ActiveRequests, rs.ActivePrefillTokens, rs.State)
					if (a["requests"] == "" || uint64(rs.ActiveRequests) == s.num(a["requests"])) &&
						(a["prefill"] == "" || rs.ActivePrefillTokens == s.num(a["prefill"])) &&
						(a["state"] == "" || rs.State == a["state"]) {
						return
					}
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.fail("state never matched; last: %s", last)
}

func (s *scenario) expectPublished(words []string, a map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if uint64(len(s.published)) != s.num(words[0]) {
		s.fail("published %d events, want %s", len(s.published), words[0])
	}
	if kind, ok := a["last"]; ok && len(s.published) > 0 {
		ev := s.published[len(s.published)-1]
		got := map[bool]string{ev.GetAdd() != nil: "add", ev.GetFree() != nil: "free", ev.GetPrefillCompleted() != nil: "prefill_completed",
			ev.GetSessionBound() != nil: "session_bound", ev.GetSessionEnded() != nil: "session_ended"}[true]
		if got != kind {
			s.fail("last published is %s, want %s", got, kind)
		}
	}
}

// endSession: end_session ID [missing=true] [bad=true] (an id the table
// refuses: bad_request).
func (s *scenario) endSession(id string, a map[string]string) {
	found, err := s.router().EndSession(ctxT(s.t), id)
	if a["bad"] == "true" {
		if !errors.Is(err, ErrBadRequest) {
			s.fail("end_session %s: %v, want bad_request", id, err)
		}
		return
	}
	if err != nil {
		s.fail("end_session %s: %v", id, err)
	}
	if want := a["missing"] != "true"; found != want {
		s.fail("end_session %s: found %v, want %v", id, found, want)
	}
}

// peerSession: peer_session ORIGIN ID worker=W/R stamp=DUR [ended=true]
// [used=DUR]: a peer's gossiped session write, versioned now+stamp and
// last used now+used (default now).
func (s *scenario) peerSession(words []string, a map[string]string) {
	now := time.Now()
	stamp := now.Add(s.dur(defaultTo(a["stamp"], "0s"))).UnixNano()
	used := now.Add(s.dur(defaultTo(a["used"], "0s"))).UnixNano()
	w := rankMsg(s.rank(defaultTo(a["worker"], "0")))
	ev := &messages.SequenceEvent{Origin: words[0], Seq: 1}
	if a["ended"] == "true" {
		ev.Data = &messages.SequenceEvent_SessionEnded{SessionEnded: &messages.SessionEnded{
			SessionId: words[1], Stamp: stamp, Writer: words[0], LastUsedUnixNano: used, Worker: w}}
	} else {
		ev.Data = &messages.SequenceEvent_SessionBound{SessionBound: &messages.SessionBound{
			SessionId: words[1], Worker: w, Stamp: stamp, Writer: words[0], LastUsedUnixNano: used}}
	}
	s.router().ApplyRemote(ev)
}

// expectSession: expect_session ID worker=W/R | bound=false [count=N]:
// the session table as a snapshot shows it (polled: peers' writes travel
// through mailboxes).
func (s *scenario) expectSession(id string, a map[string]string) {
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
		last = fmt.Sprintf("bound %v worker %v entries %d", bound, worker, len(evs))
		ok := (a["count"] == "" || uint64(len(evs)) == s.num(a["count"])) &&
			(a["bound"] != "false" || !bound) &&
			(a["worker"] == "" || (bound && worker == s.rank(a["worker"])))
		if ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.fail("session %s never matched; last: %s", id, last)
}
