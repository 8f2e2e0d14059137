package parity

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func small() Config {
	c := DefaultConfig()
	c.Window, c.MinSamples, c.MismatchThreshold, c.CleanWindow = 10, 4, 0.25, 3
	return c
}

func obs(model string, router, engine int) Observation {
	return Observation{Model: model, Source: SourceRouter, RouterTokens: router, Usage: Usage{PromptTokens: engine}}
}

// TestSwitchRule: a model switches once its window holds MinSamples
// requests and more than MismatchThreshold of them mismatch; not before,
// not for engine- or id-tokenized requests, and not without AutoSwitch.
func TestSwitchRule(t *testing.T) {
	cases := []struct {
		name   string
		auto   bool
		source Source
		// pattern: true = mismatch, in order
		pattern    []bool
		switchAt   int // index of the request that switches (-1: none)
		breachedAt int
	}{
		{"all match", true, SourceRouter, []bool{false, false, false, false, false, false}, -1, -1},
		{"mismatches before min samples wait", true, SourceRouter, []bool{true, true, true, true}, 3, 3},
		{"one in four is at the threshold, not over", true, SourceRouter, []bool{false, false, false, true, false, false, false, true}, -1, -1},
		{"two in five is over", true, SourceRouter, []bool{false, true, false, false, true}, 4, 4},
		{"engine-tokenized requests do not judge", true, SourceEngine, []bool{true, true, true, true, true}, -1, -1},
		{"token ids do not judge", true, SourceTokenIDs, []bool{true, true, true, true, true}, -1, -1},
		{"no auto switch: breached once", false, SourceRouter, []bool{true, true, true, true, true, true}, -1, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := small()
			cfg.AutoSwitch = tc.auto
			tr, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			switchAt, breachedAt := -1, -1
			for i, mis := range tc.pattern {
				o := obs("m", 100, 100)
				o.Source = tc.source
				if mis {
					o.Usage.PromptTokens = 103
				}
				res := tr.Observe(t0.Add(time.Duration(i)*time.Second), o)
				if res.Mismatch != mis {
					t.Fatalf("request %d: mismatch %v, want %v", i, res.Mismatch, mis)
				}
				if res.Switched {
					if res.Ratio > 1-cfg.MismatchThreshold {
						t.Fatalf("switched with parity ratio %v", res.Ratio)
					}
					if switchAt >= 0 {
						t.Fatalf("switched twice (%d and %d)", switchAt, i)
					}
					switchAt = i
				}
				if res.Breached {
					if breachedAt >= 0 {
						t.Fatalf("breach reported twice (%d and %d)", breachedAt, i)
					}
					breachedAt = i
				}
			}
			if switchAt != tc.switchAt || breachedAt != tc.breachedAt {
				t.Fatalf("switched at %d, breached at %d; want %d, %d", switchAt, breachedAt, tc.switchAt, tc.breachedAt)
			}
			wantMode := ModeRouter
			if tc.switchAt >= 0 {
				wantMode = ModeEngine
			}
			if got := tr.Mode("m"); got != wantMode {
				t.Fatalf("mode %s, want %s", got, wantMode)
			}
		})
	}
}

// TestWindowSlides: old mismatches leave the window, so a model that
// mismatched long ago and matches since is not switched.
func TestWindowSlides(t *testing.T) {
	cfg := small()
	cfg.MismatchThreshold = 0.5
	tr, _ := New(cfg, nil)
	// Three mismatches after four matches (3/7, under 0.5), then ten
	// matches push them out of the 10-request window.
	seq := []bool{false, false, false, false, true, true, true, false, false, false, false, false, false, false, false, false, false}
	for i, mis := range seq {
		engine := 10
		if mis {
			engine = 11
		}
		if res := tr.Observe(t0, obs("m", 10, engine)); res.Switched {
			t.Fatalf("switched at %d", i)
		}
	}
	st, _ := tr.ModelStatus("m")
	if st.WindowRequests != 10 || st.WindowMismatches != 0 || st.ParityRatio != 1 {
		t.Fatalf("window after sliding: %+v", st)
	}
	if st.Requests != uint64(len(seq)) || st.Mismatches != 3 {
		t.Fatalf("totals: %+v", st)
	}
}

// TestSwitchBack: a clean window of background checks, or the operator,
// returns a switched model to router tokenization; a mismatching check
// restarts the count.
func TestSwitchBack(t *testing.T) {
	tr, _ := New(small(), nil)
	trip := func() {
		for i := 0; i < 4; i++ {
			tr.Observe(t0, obs("m", 10, 12))
		}
		if tr.Mode("m") != ModeEngine {
			t.Fatal("not switched")
		}
	}
	trip()
	st, _ := tr.ModelStatus("m")
	if st.SwitchedAt == nil || !st.SwitchedAt.Equal(t0) || st.Reason != "token_mismatch" {
		t.Fatalf("status after switch: %+v", st)
	}
	steps := []struct {
		router, engine int
		back           bool
	}{{10, 10, false}, {10, 10, false}, {10, 12, false}, {10, 10, false}, {10, 10, false}, {10, 10, true}}
	for i, s := range steps {
		if got := tr.Check(t0, "m", s.router, s.engine); got != s.back {
			t.Fatalf("check %d: back %v, want %v", i, got, s.back)
		}
	}
	if tr.Mode("m") != ModeRouter {
		t.Fatal("clean window did not switch back")
	}
	if tr.Check(t0, "m", 10, 10) {
		t.Fatal("a check in router mode switched")
	}
	trip()
	if !tr.Reset("m") || tr.Mode("m") != ModeRouter {
		t.Fatal("operator reset did not switch back")
	}
	if tr.Reset("m") || tr.Reset("never-seen") {
		t.Fatal("reset of a router-mode model reported a switch")
	}
	st, _ = tr.ModelStatus("m")
	if st.WindowRequests != 0 || st.SwitchedAt != nil {
		t.Fatalf("status after reset: %+v", st)
	}
	// Clean window 0: only the operator switches back.
	cfg := small()
	cfg.CleanWindow = 0
	tr, _ = New(cfg, nil)
	trip()
	for i := 0; i < 100; i++ {
		if tr.Check(t0, "m", 10, 10) {
			t.Fatal("switched back with clean window 0")
		}
	}
}

type driftLog []struct {
	k RankKey
	d Drift
}

func (l *driftLog) ParityDrift(k RankKey, d Drift) {
	*l = append(*l, struct {
		k RankKey
		d Drift
	}{k, d})
}

// TestCachedParity: predicted hits are capped as the engine caps a hit
// (never the last token), compared with the engine's cached tokens, and
// the rank's window rate goes to the drift observer.
func TestCachedParity(t *testing.T) {
	cases := []struct {
		name                        string
		router, engine              int
		predicted, cached           int
		hasPred, hasCached          bool
		compared                    bool
		wantPred, wantConf, wantUnc int
	}{
		{"confirmed", 100, 100, 64, 64, true, true, true, 64, 64, 0},
		{"engine found more", 100, 100, 32, 64, true, true, true, 32, 64, 0},
		{"half unconfirmed", 100, 100, 64, 32, true, true, true, 64, 32, 32},
		{"whole prompt predicted: last token never cached", 64, 64, 64, 48, true, true, true, 63, 48, 15},
		{"capped by the engine's shorter count", 64, 50, 64, 48, true, true, true, 49, 48, 1},
		{"no cached tokens reported", 100, 100, 64, 0, true, false, false, 0, 0, 0},
		{"no prediction (disaggregated)", 100, 100, 64, 64, false, true, false, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var log driftLog
			tr, _ := New(small(), &log)
			o := Observation{Model: "m", Worker: 7, DpRank: 1, RouterTokens: tc.router, PredictedCachedTokens: tc.predicted,
				HasPrediction: tc.hasPred, Usage: Usage{PromptTokens: tc.engine, CachedTokens: tc.cached, HasCached: tc.hasCached}}
			res := tr.Observe(t0, o)
			if res.CacheCompared != tc.compared || res.Predicted != tc.wantPred || res.Confirmed != tc.wantConf || res.Unconfirmed != tc.wantUnc {
				t.Fatalf("got %+v", res)
			}
			if !tc.compared {
				if len(log) != 0 {
					t.Fatalf("drift reported without a comparison: %+v", log)
				}
				return
			}
			if len(log) != 1 || log[0].k != (RankKey{7, 1}) || log[0].d.PredictedTokens != tc.wantPred || log[0].d.UnconfirmedTokens != tc.wantUnc {
				t.Fatalf("drift: %+v", log)
			}
		})
	}
}

// TestDriftWindow: the rank's rate covers its last Window predictions;
// a rank that reported cached tokens once and then omits them (SGLang's
// zero) counts as zero confirmed; idle ranks are dropped.
func TestDriftWindow(t *testing.T) {
	var log driftLog
	cfg := small()
	cfg.Window, cfg.MinSamples = 4, 1
	tr, _ := New(cfg, &log)
	k := RankKey{1, 0}
	send := func(at time.Time, pred, cached int, has bool) {
		tr.Observe(at, Observation{Model: "m", Worker: 1, RouterTokens: 200, HasPrediction: true, PredictedCachedTokens: pred,
			Usage: Usage{PromptTokens: 200, CachedTokens: cached, HasCached: has}})
	}
	for i := 0; i < 4; i++ {
		send(t0, 100, 0, true) // all unconfirmed
	}
	if d, _ := tr.RankDrift(k); d.Rate != 1 || d.Samples != 4 {
		t.Fatalf("drift %+v", d)
	}
	for i := 0; i < 4; i++ {
		send(t0, 100, 100, true) // the window slides to all confirmed
	}
	if d, _ := tr.RankDrift(k); d.Rate != 0 || d.PredictedTokens != 400 {
		t.Fatalf("drift after sliding %+v", d)
	}
	send(t0, 100, 0, false) // SGLang: absent after a report means 0
	if d, _ := tr.RankDrift(k); d.UnconfirmedTokens != 100 {
		t.Fatalf("absent cached tokens from a reporting rank: %+v", d)
	}
	// A rank idle past RankIdle goes at the next sweep.
	send(t0.Add(cfg.RankIdle+2*time.Minute), 0, 0, true)
	tr.Observe(t0.Add(2*cfg.RankIdle+4*time.Minute), obs("m", 1, 1))
	if _, ok := tr.RankDrift(k); ok {
		t.Fatal("idle rank kept")
	}
	if st := tr.Status(); len(st.Ranks) != 0 || len(st.Models) != 1 {
		t.Fatalf("status: %+v", st)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Config){
		func(c *Config) { c.Window = 0 },
		func(c *Config) { c.MinSamples = c.Window + 1 },
		func(c *Config) { c.MismatchThreshold = 1 },
		func(c *Config) { c.MismatchThreshold = -0.1 },
		func(c *Config) { c.CleanWindow = -1 },
		func(c *Config) { c.RankIdle = 0 },
	}
	for i, f := range bad {
		c := DefaultConfig()
		f(&c)
		if _, err := New(c, nil); err == nil {
			t.Fatalf("bad config %d accepted", i)
		}
	}
}
