package trust

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

var (
	r0 = kv.WorkerWithDpRank{WorkerID: 7, DpRank: 0}
	r1 = kv.WorkerWithDpRank{WorkerID: 7, DpRank: 1}
)

// step is one input to the tracker at t0+at, and the state of r0 after.
type step struct {
	at     time.Duration
	do     func(t *Tracker, now time.Time) []Transition
	want   State
	reason string // r0's cause after the step ("" for exact)
}

func routed(w kv.WorkerWithDpRank) func(*Tracker, time.Time) []Transition {
	return func(t *Tracker, now time.Time) []Transition { t.Routed(w, now); return nil }
}
func seen(w kv.WorkerWithDpRank) func(*Tracker, time.Time) []Transition {
	return func(t *Tracker, now time.Time) []Transition { return t.EventSeen(w, now) }
}
func gap(w kv.WorkerWithDpRank) func(*Tracker, time.Time) []Transition {
	return func(t *Tracker, now time.Time) []Transition { return t.GapOpened(w, 3, now) }
}
func replayOK(w kv.WorkerWithDpRank) func(*Tracker, time.Time) []Transition {
	return func(t *Tracker, now time.Time) []Transition { return t.ReplayCompleted(w, now) }
}
func replayFail(w kv.WorkerWithDpRank) func(*Tracker, time.Time) []Transition {
	return func(t *Tracker, now time.Time) []Transition { return t.ReplayFailed(w, "replay_error", now) }
}
func cleared(w kv.WorkerWithDpRank) func(*Tracker, time.Time) []Transition {
	return func(t *Tracker, now time.Time) []Transition { return t.Cleared(w, now) }
}
func refused(w kv.WorkerWithDpRank, reason string, n int) func(*Tracker, time.Time) []Transition {
	return func(t *Tracker, now time.Time) []Transition {
		var out []Transition
		for range n {
			out = append(out, t.Refused(w, reason, now)...)
		}
		return out
	}
}
func parity(w kv.WorkerWithDpRank, n, predicted, confirmed int) func(*Tracker, time.Time) []Transition {
	return func(t *Tracker, now time.Time) []Transition {
		var out []Transition
		for range n {
			out = append(out, t.ObserveParity(w, predicted, confirmed, now)...)
		}
		return out
	}
}
func tick() func(*Tracker, time.Time) []Transition {
	return func(t *Tracker, now time.Time) []Transition { return t.Tick(now) }
}

func testConfig() Config {
	c := DefaultConfig()
	c.GapGrace = 5 * time.Second
	c.StaleAfter = 10 * time.Second
	c.RefusedWindow = 30 * time.Second
	c.RefusedUntrusted = 4
	c.ParityWindow = 4
	return c
}

func TestTransitions(t *testing.T) {
	s := time.Second
	cases := []struct {
		name  string
		steps []step
	}{
		{"gap repaired by a replay stays short of untrusted", []step{
			{0, gap(r0), Degraded, ReasonGapOpen},
			{2 * s, tick(), Degraded, ReasonGapOpen},
			{3 * s, replayOK(r0), Exact, ""},
			{20 * s, tick(), Exact, ""},
		}},
		{"gap unrepaired past the grace is untrusted until a clear", []step{
			{0, gap(r0), Degraded, ReasonGapOpen},
			{5 * s, tick(), Untrusted, ReasonGapUnrepaired},
			{6 * s, seen(r0), Untrusted, ReasonGapUnrepaired},
			{60 * s, tick(), Untrusted, ReasonGapUnrepaired},
			{61 * s, cleared(r0), Exact, ""},
		}},
		{"failed replay is untrusted at once; a completed one restores", []step{
			{0, gap(r0), Degraded, ReasonGapOpen},
			{1 * s, replayFail(r0), Untrusted, ReasonReplayFailed},
			{2 * s, replayOK(r0), Exact, ""},
		}},
		{"stale stream: routed with no event for StaleAfter", []step{
			{0, seen(r0), Exact, ""},
			{1 * s, routed(r0), Exact, ""},
			{5 * s, routed(r0), Exact, ""},
			{10 * s, tick(), Exact, ""},
			{11 * s, tick(), Untrusted, ReasonStale},
		}},
		{"an event resets the stale clock", []step{
			{1 * s, routed(r0), Exact, ""},
			{9 * s, seen(r0), Exact, ""},
			{12 * s, tick(), Exact, ""},
			{13 * s, routed(r0), Exact, ""},
			{22 * s, tick(), Exact, ""},
			{23 * s, tick(), Untrusted, ReasonStale},
		}},
		{"an event older than the routed request does not reset the clock", []step{
			{5 * s, routed(r0), Exact, ""},
			{5 * s, func(t *Tracker, now time.Time) []Transition { return t.EventSeen(r0, now.Add(-time.Second)) }, Exact, ""},
			{15 * s, tick(), Untrusted, ReasonStale},
		}},
		{"no routed requests, no staleness", []step{
			{0, seen(r0), Exact, ""},
			{100 * s, tick(), Exact, ""},
		}},
		{"stale lifted when events resume with no gap", []step{
			{0, routed(r0), Exact, ""},
			{10 * s, tick(), Untrusted, ReasonStale},
			{11 * s, seen(r0), Exact, ""},
		}},
		{"stale kept when events resume after a gap", []step{
			{0, routed(r0), Exact, ""},
			{10 * s, tick(), Untrusted, ReasonStale},
			{11 * s, gap(r0), Untrusted, ReasonStale},
			{11 * s, seen(r0), Untrusted, ReasonStale},
			{16 * s, tick(), Untrusted, ReasonGapUnrepaired},
			{17 * s, cleared(r0), Exact, ""},
		}},
		{"refusals degrade, age out, and enough of them untrust", []step{
			{0, refused(r0, "parent_not_found", 1), Degraded, ReasonRefused},
			{29 * s, tick(), Degraded, ReasonRefused},
			{31 * s, tick(), Exact, ""},
			{40 * s, refused(r0, "parent_not_found", 3), Degraded, ReasonRefused},
			{41 * s, refused(r0, "invalid_event", 1), Untrusted, ReasonRefused},
			{200 * s, tick(), Untrusted, ReasonRefused},
			{201 * s, replayOK(r0), Exact, ""},
		}},
		{"removals of unknown blocks do not count", []step{
			{0, refused(r0, "block_not_found", 10), Exact, ""},
		}},
		{"parity: false hits untrust, clean window restores", []step{
			{0, parity(r0, 3, 100, 0), Exact, ""},
			{1 * s, parity(r0, 1, 100, 0), Untrusted, ReasonParityDrift},
			{2 * s, parity(r0, 4, 100, 60), Untrusted, ReasonParityDrift}, // 40% missed: still latched
			{3 * s, parity(r0, 4, 100, 100), Exact, ""},
		}},
		{"parity: degraded, then lifted by a window under the degraded bound", []step{
			{0, parity(r0, 4, 100, 80), Degraded, ReasonParityDrift},
			{1 * s, parity(r0, 4, 100, 95), Exact, ""},
		}},
		{"parity: requests with no predicted hit are not counted", []step{
			{0, parity(r0, 100, 0, 0), Exact, ""},
			{1 * s, parity(r0, 3, 100, 0), Exact, ""},
		}},
		{"a clean parity window restores a stale rank", []step{
			{0, routed(r0), Exact, ""},
			{10 * s, tick(), Untrusted, ReasonStale},
			{11 * s, parity(r0, 4, 64, 64), Exact, ""},
			{12 * s, tick(), Exact, ""},
		}},
		{"the other rank's trouble is not this rank's", []step{
			{0, gap(r1), Exact, ""},
			{0, replayFail(r1), Exact, ""},
			{0, routed(r1), Exact, ""},
			{100 * s, tick(), Exact, ""},
		}},
	}
	t0 := time.Unix(1_000_000, 0)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := New(testConfig())
			tr.SetRanks([]kv.WorkerWithDpRank{r0, r1})
			for i, st := range c.steps {
				st.do(tr, t0.Add(st.at))
				got, why := tr.State(r0)
				if got != st.want || why != st.reason {
					t.Fatalf("step %d (at %s): r0 is %s (%q), want %s (%q)", i, st.at, got, why, st.want, st.reason)
				}
			}
		})
	}
}

func TestTransitionsReported(t *testing.T) {
	tr := New(testConfig())
	tr.SetRanks([]kv.WorkerWithDpRank{r0, r1})
	t0 := time.Unix(1_000_000, 0)
	got := tr.GapOpened(r0, 2, t0)
	want := Transition{Rank: r0, From: Exact, To: Degraded, Reason: ReasonGapOpen}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("gap: %+v, want %+v", got, want)
	}
	tr.GapOpened(r1, 2, t0)
	got = tr.Tick(t0.Add(5 * time.Second))
	if len(got) != 2 || got[0].Rank != r0 || got[1].Rank != r1 || got[0].To != Untrusted || got[0].Reason != ReasonGapUnrepaired {
		t.Fatalf("tick: %+v", got)
	}
	if got := tr.Tick(t0.Add(6 * time.Second)); len(got) != 0 {
		t.Fatalf("a second tick reports again: %+v", got)
	}
	got = tr.Cleared(r0, t0.Add(7*time.Second))
	if len(got) != 1 || got[0].From != Untrusted || got[0].To != Exact || got[0].Reason != ReasonCleared {
		t.Fatalf("clear: %+v", got)
	}
	if ne := tr.NotExact(); len(ne) != 1 || ne[r1] != Untrusted {
		t.Fatalf("NotExact = %v, want only r1 untrusted", ne)
	}
	if d := tr.Detail(r1); d != "2 events lost" {
		t.Fatalf("detail %q", d)
	}
	if d := tr.Detail(r0); d != "" {
		t.Fatalf("an exact rank has detail %q", d)
	}
}

func TestUnknownRanksIgnoredAndForgotten(t *testing.T) {
	tr := New(testConfig())
	t0 := time.Unix(1_000_000, 0)
	if got := tr.ReplayFailed(r0, "x", t0); got != nil {
		t.Fatalf("unknown rank changed: %+v", got)
	}
	tr.SetRanks([]kv.WorkerWithDpRank{r0})
	tr.ReplayFailed(r0, "x", t0)
	tr.SetRanks(nil)
	tr.SetRanks([]kv.WorkerWithDpRank{r0})
	if s, _ := tr.State(r0); s != Exact {
		t.Fatalf("a rank registered again starts %s, want exact", s)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	bad := []func(*Config){
		func(c *Config) { c.GapGrace = 0 },
		func(c *Config) { c.StaleAfter = -1 },
		func(c *Config) { c.RefusedWindow = 0 },
		func(c *Config) { c.RefusedUntrusted = 0 },
		func(c *Config) { c.ParityWindow = 0 },
		func(c *Config) { c.ParityClean = 0.2 },
		func(c *Config) { c.ParityUntrusted = 0.05 },
		func(c *Config) { c.FallbackTTL = 0 },
	}
	for i, mut := range bad {
		c := DefaultConfig()
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: invalid config accepted: %+v", i, c)
		}
	}
}
