// Package scenario reads the scheduler's scenario scripts
// (decide/testdata/scenarios, described in its README) for the tests that
// run them: decide's, against the pure decision with a fake clock, and
// actors', against a real router. It holds the language (lines, words,
// key=value arguments, named prompts); each runner gives the commands
// their meaning.
package scenario

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// Dir is the scripts' folder relative to a package directory of this
// module (tests run in their package's directory).
const Dir = "../decide/testdata/scenarios"

// Line is one command of a script: its name, its positional words and
// its key=value arguments.
type Line struct {
	T     testing.TB
	Where string // file:line: text, for failures
	Cmd   string
	Words []string
	Args  map[string]string
}

// Files lists the scripts in dir (every *.txt, or the named ones).
func Files(t testing.TB, dir string, names ...string) []string {
	t.Helper()
	if len(names) > 0 {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = filepath.Join(dir, n+".txt")
		}
		return out
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in %s: %v", dir, err)
	}
	return files
}

// Name is a script's test name.
func Name(path string) string { return strings.TrimSuffix(filepath.Base(path), ".txt") }

// Run calls step with each command of the script at path, in order;
// blank lines and lines starting with # are skipped.
func Run(t testing.TB, path string, step func(*Line)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		l := &Line{T: t, Where: fmt.Sprintf("%s:%d: %s", filepath.Base(path), n, text), Cmd: fields[0], Words: fields[1:],
			Args: map[string]string{}}
		for _, w := range l.Words {
			if k, v, ok := strings.Cut(w, "="); ok {
				l.Args[k] = v
			}
		}
		step(l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// Fail stops the script at this line.
func (l *Line) Fail(format string, a ...any) {
	l.T.Helper()
	l.T.Fatalf("%s\n\t%s", l.Where, fmt.Sprintf(format, a...))
}

// Word is the i-th positional word.
func (l *Line) Word(i int) string {
	if i >= len(l.Words) {
		l.Fail("%s wants at least %d words", l.Cmd, i+1)
	}
	return l.Words[i]
}

// Or is the argument k, or d when absent.
func (l *Line) Or(k, d string) string {
	if v, ok := l.Args[k]; ok {
		return v
	}
	return d
}

func (l *Line) Num(v string) uint64 {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		l.Fail("bad number %q", v)
	}
	return n
}

func (l *Line) Float(v string) float64 {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		l.Fail("bad float %q", v)
	}
	return f
}

func (l *Line) Dur(v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		l.Fail("bad duration %q", v)
	}
	return d
}

// Rank reads W/R (W alone: rank 0).
func (l *Line) Rank(v string) kv.WorkerWithDpRank {
	w, dp, _ := strings.Cut(v, "/")
	if dp == "" {
		dp = "0"
	}
	return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(l.Num(w)), DpRank: uint32(l.Num(dp))}
}

// Nums reads a comma-separated list of numbers.
func (l *Line) Nums(v string) []uint64 {
	var out []uint64
	for _, s := range strings.Split(v, ",") {
		out = append(out, l.Num(s))
	}
	return out
}

// Tokens is the named prompt of prompt=NAME tokens=N: the same name always
// gives the same tokens, so a shorter use is a prefix of a longer one.
func (l *Line) Tokens() []uint32 {
	h := fnv.New32a()
	h.Write([]byte(l.Args["prompt"]))
	return Prompt(int(l.Num(l.Args["tokens"])), h.Sum32()%40000)
}

// Prompt is n tokens salted by salt.
func Prompt(n int, salt uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = salt*100000 + uint32(i)
	}
	return out
}

// Conditions are the worker conditions a script names.
var Conditions = map[string]kv.WorkerState{"busy": kv.WorkerBusy, "unhealthy": kv.WorkerUnhealthy, "draining": kv.WorkerDraining}

// Heartbeat is the worker command's registration: worker ID [dp=N]
// [start=S] [budget=TOKENS] [kv_blocks=N] [role=prefill|decode|both].
func (l *Line) Heartbeat() *messages.WorkerHeartbeat {
	hb := &messages.WorkerHeartbeat{WorkerId: l.Num(l.Word(0)), DataParallelSize: uint32(l.Num(l.Or("dp", "1"))),
		DataParallelStartRank: uint32(l.Num(l.Or("start", "0"))), MaxNumBatchedTokens: l.Num(l.Or("budget", "0")),
		TotalKvBlocks: l.Num(l.Or("kv_blocks", "0"))}
	if v, ok := l.Args["role"]; ok {
		role, err := kv.ParseRole(v)
		if err != nil {
			l.Fail("%v", err)
		}
		hb.Role = messages.WorkerRole(role)
	}
	return hb
}

// Request is the route command's request: route ID prompt=P tokens=N
// [update=false] [pinned=W/R] [allowed=1,2] [jump=S] [session=S].
func (l *Line) Request() *messages.RouteRequest {
	a := l.Args
	req := &messages.RouteRequest{RequestId: l.Word(0), TokenIds: l.Tokens(), UpdateStates: a["update"] != "false", SessionId: a["session"]}
	if v, ok := a["pinned"]; ok {
		w := l.Rank(v)
		req.PinnedWorker = &messages.WorkerRank{WorkerId: uint64(w.WorkerID), DpRank: w.DpRank}
	}
	if v, ok := a["allowed"]; ok {
		req.AllowedWorkerIds = l.Nums(v)
	}
	if v, ok := a["jump"]; ok {
		req.PriorityJump = l.Float(v)
	}
	return req
}

// PeerEvent is a peer's gossiped add or free: peer_add ORIGIN ID
// worker=W/R prompt=P tokens=N prefill=T [stride=S], or peer_free ORIGIN ID.
func (l *Line) PeerEvent() *messages.SequenceEvent {
	id := l.Word(1)
	if l.Cmd == "peer_free" {
		return &messages.SequenceEvent{Origin: l.Word(0), Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: id}}}
	}
	w := l.Rank(l.Args["worker"])
	return &messages.SequenceEvent{Origin: l.Word(0), Data: &messages.SequenceEvent_Add{Add: &messages.AddRequest{
		RequestId: id, Worker: &messages.WorkerRank{WorkerId: uint64(w.WorkerID), DpRank: w.DpRank},
		PrefillTokens: l.Num(l.Args["prefill"]), TrackPrefillTokens: true,
		Isl: uint64(len(l.Tokens())), Stride: uint32(l.Num(l.Or("stride", "1"))),
	}}}
}

// PeerSession is a peer's gossiped session write: peer_session ORIGIN ID
// [worker=W/R] [stamp=DUR] [used=DUR] [ended=true], versioned now+stamp
// and last used now+used.
func (l *Line) PeerSession(now time.Time) *messages.SequenceEvent {
	origin, id := l.Word(0), l.Word(1)
	stamp, used := now.Add(l.Dur(l.Or("stamp", "0s"))).UnixNano(), now.Add(l.Dur(l.Or("used", "0s"))).UnixNano()
	rk := l.Rank(l.Or("worker", "0"))
	w := &messages.WorkerRank{WorkerId: uint64(rk.WorkerID), DpRank: rk.DpRank}
	ev := &messages.SequenceEvent{Origin: origin, Seq: 1}
	if l.Args["ended"] == "true" {
		ev.Data = &messages.SequenceEvent_SessionEnded{SessionEnded: &messages.SessionEnded{
			SessionId: id, Stamp: stamp, Writer: origin, LastUsedUnixNano: used, Worker: w}}
	} else {
		ev.Data = &messages.SequenceEvent_SessionBound{SessionBound: &messages.SessionBound{
			SessionId: id, Worker: w, Stamp: stamp, Writer: origin, LastUsedUnixNano: used}}
	}
	return ev
}

// CheckError checks expect ID error=KIND [contains=words] against the
// error kind a runner read and its message.
func (l *Line) CheckError(kind, msg string) {
	l.T.Helper()
	if want := l.Args["error"]; kind != want {
		l.Fail("got error %q (%s), want error %s", msg, kind, want)
	}
	if c, ok := l.Args["contains"]; ok && !strings.Contains(msg, strings.ReplaceAll(c, "_", " ")) {
		l.Fail("error %q does not contain %q", msg, c)
	}
}

// CheckReply checks expect ID worker=W/R [overlap=N] [prefill=W/R]
// [prefill_overlap=N] [local=true|false] | not_worker=W/R |
// apart_from=ROUTE_ID against a route's reply; other is another route's
// rank (false: not routed).
func (l *Line) CheckReply(reply *messages.RouteReply, other func(id string) (kv.WorkerWithDpRank, bool)) {
	l.T.Helper()
	a := l.Args
	rankOf := func(m *messages.WorkerRank) kv.WorkerWithDpRank {
		return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(m.GetWorkerId()), DpRank: m.GetDpRank()}
	}
	got := rankOf(reply.Worker)
	if v, ok := a["worker"]; ok && got != l.Rank(v) {
		l.Fail("routed to %v, want %v", got, l.Rank(v))
	}
	if v, ok := a["not_worker"]; ok && got == l.Rank(v) {
		l.Fail("routed to %v, which it must avoid", got)
	}
	if v, ok := a["apart_from"]; ok {
		if o, routed := other(v); routed && o == got {
			l.Fail("routed to %v like %s, want another rank", got, v)
		}
	}
	if v, ok := a["overlap"]; ok && uint64(reply.OverlapBlocks) != l.Num(v) {
		l.Fail("overlap %d, want %s", reply.OverlapBlocks, v)
	}
	pf := reply.PrefillWorker
	if v, ok := a["prefill"]; ok && (pf == nil || rankOf(pf) != l.Rank(v)) {
		l.Fail("prefill on %v, want %v", pf, l.Rank(v))
	}
	if a["local"] == "true" && pf != nil {
		l.Fail("prefill on %v, want it local to the decode worker", rankOf(pf))
	}
	if a["local"] == "false" && pf == nil {
		l.Fail("prefilled locally on %v, want a remote prefill", got)
	}
	if v, ok := a["prefill_overlap"]; ok && uint64(reply.PrefillOverlapBlocks) != l.Num(v) {
		l.Fail("prefill overlap %d, want %s", reply.PrefillOverlapBlocks, v)
	}
}

// CheckPublished checks expect_published N [last=KIND] against the
// gossip a replica published.
func (l *Line) CheckPublished(evs []*messages.SequenceEvent) {
	l.T.Helper()
	if uint64(len(evs)) != l.Num(l.Word(0)) {
		l.Fail("published %d events, want %s", len(evs), l.Word(0))
	}
	if kind, ok := l.Args["last"]; ok && len(evs) > 0 {
		ev := evs[len(evs)-1]
		got := map[bool]string{ev.GetAdd() != nil: "add", ev.GetFree() != nil: "free", ev.GetPrefillCompleted() != nil: "prefill_completed",
			ev.GetSessionBound() != nil: "session_bound", ev.GetSessionEnded() != nil: "session_ended"}[true]
		if got != kind {
			l.Fail("last published is %s, want %s", got, kind)
		}
	}
}

// SessionMatches checks expect_session ID worker=W/R | bound=false
// [count=N] against the session table's bindings (bound, worker) and
// entries; the text says what was seen.
func (l *Line) SessionMatches(bound bool, worker kv.WorkerWithDpRank, entries int) (bool, string) {
	a := l.Args
	ok := (a["count"] == "" || uint64(entries) == l.Num(a["count"])) && (a["bound"] != "false" || !bound) &&
		(a["worker"] == "" || (bound && worker == l.Rank(a["worker"])))
	return ok, fmt.Sprintf("bound %v worker %v entries %d", bound, worker, entries)
}

// RankMatches checks expect_rank W/R [requests=N] [prefill=T] [state=S]
// against a rank's load and state; the text says what was seen.
func (l *Line) RankMatches(requests, prefill uint64, state string) (bool, string) {
	a := l.Args
	ok := (a["requests"] == "" || requests == l.Num(a["requests"])) && (a["prefill"] == "" || prefill == l.Num(a["prefill"])) &&
		(a["state"] == "" || state == a["state"])
	return ok, fmt.Sprintf("requests %d prefill %d state %s", requests, prefill, state)
}
