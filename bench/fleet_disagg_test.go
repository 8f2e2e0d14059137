package bench

import (
	"context"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

func TestDisaggOptions(t *testing.T) {
	tests := []struct {
		disagg       string
		workers      int
		prefill, dec int
		roles        []kv.Role
		wantErr      bool
	}{
		{"", 3, 0, 0, []kv.Role{kv.RoleBoth, kv.RoleBoth, kv.RoleBoth}, false},
		{"1:2", 3, 1, 2, []kv.Role{kv.RolePrefill, kv.RoleDecode, kv.RoleDecode}, false},
		{"4:4", 8, 4, 4, nil, false},
		{"0:4", 0, 0, 0, nil, true},
		{"4", 0, 0, 0, nil, true},
		{"4:4:1", 0, 0, 0, nil, true},
		{"a:b", 0, 0, 0, nil, true},
	}
	for _, tt := range tests {
		o := fastFleetOptions(8)
		o.Disagg = tt.disagg
		err := o.Finish()
		if (err != nil) != tt.wantErr {
			t.Fatalf("%q: err %v", tt.disagg, err)
		}
		if err != nil {
			continue
		}
		if tt.disagg != "" && o.Workers != tt.workers {
			t.Fatalf("%q: %d workers", tt.disagg, o.Workers)
		}
		if p, d, _ := o.Pools(); p != tt.prefill || d != tt.dec {
			t.Fatalf("%q: pools %d:%d", tt.disagg, p, d)
		}
		for i, r := range tt.roles {
			if got := o.role(i); got != r {
				t.Fatalf("%q: worker %d role %v, want %v", tt.disagg, i, got, r)
			}
		}
		if err := o.Validate(); err != nil {
			t.Fatalf("%q: %v", tt.disagg, err)
		}
	}
	o := fastFleetOptions(8)
	o.Disagg = "1:2" // without Finish: the counts disagree
	if err := o.Validate(); err == nil {
		t.Fatal("--disagg 1:2 with 8 workers must be refused")
	}
}

// A 1P+2D fleet behind the router: the first request is prefilled on the
// prefill worker and decoded on a decode worker; once a decode worker
// has received the shared prefix, requests stay local on it.
func TestDisaggregatedEmbeddedFleet(t *testing.T) {
	ctx := context.Background()
	opts := fastFleetOptions(3)
	opts.Disagg = "1:2"
	opts.MaxLocalPrefillLength = 64
	if err := opts.Finish(); err != nil {
		t.Fatal(err)
	}
	factory, err := EmbeddedFleetFactory(opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := factory(ctx, PolicyKVRouter)
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close(ctx)
	prompts, _ := SharedPrefixPrompts(SharedPrefixConfig{Groups: 1, PromptsPerGroup: 1, SystemTokens: 512, QuestionTokens: 8, OutputTokens: 4}, 5, 1)
	reqs, _ := PoissonSchedule(prompts, 50, 1)
	for i := range reqs {
		reqs[i].Arrival = time.Duration(i) * 150 * time.Millisecond // each one's KV events arrive before the next
	}
	d, err := NewDispatcher(PolicyKVRouter, fleet.RouterURLs(), fleet.WorkerURLs(), 1)
	if err != nil {
		t.Fatal(err)
	}
	results := Run(ctx, reqs, d, &Client{HTTP: newHTTPClient(), Model: "mock-model"}, 10*time.Second)
	if p := Summarize(PolicyKVRouter, 50, results); p.Errors != 0 || p.ITLP90 <= 0 {
		t.Fatalf("errors %d (%v), itl p90 %v", p.Errors, results[0].Err, p.ITLP90)
	}
	paths, err := disaggPaths(ctx, newHTTPClient(), fleet.RouterURLs())
	if err != nil || paths["remote"] != 1 || paths["short_prompt"] != 4 {
		t.Fatalf("disaggregation paths %v, %v; want 1 remote, 4 short_prompt", paths, err)
	}
	ws := fleet.(*routedFleet).ws
	prefill := ws.servers[0].Engine().Stats()[0]
	decoded := ws.servers[1].Engine().Stats()[0].FinishedRequests + ws.servers[2].Engine().Stats()[0].FinishedRequests
	if prefill.FinishedRequests != 1 || prefill.GenerationTokens != 1 || decoded != 5 {
		t.Fatalf("prefill worker served %d requests (%d tokens), decode workers %d; want 1 remote prefill, then local, 5 decodes",
			prefill.FinishedRequests, prefill.GenerationTokens, decoded)
	}
}

func TestParseDisaggLine(t *testing.T) {
	for line, want := range map[string]struct {
		path string
		n    uint64
		ok   bool
	}{
		`kvrouter_disaggregation_decisions_total{path="remote"} 12`:          {"remote", 12, true},
		`kvrouter_disaggregation_decisions_total{path="short_prompt"} 3e+00`: {"short_prompt", 3, true},
		`# HELP kvrouter_disaggregation_decisions_total Decisions`:           {},
		`kvrouter_disaggregation_decisions_total{path="remote"} -1`:          {},
		`kvrouter_decisions_total{outcome="routed"} 5`:                       {},
	} {
		path, n, ok := parseDisaggLine(line)
		if path != want.path || n != want.n || ok != want.ok {
			t.Errorf("%q: %q %d %v", line, path, n, ok)
		}
	}
}
