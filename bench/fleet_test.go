package bench

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/mockengine"
)

func fastFleetOptions(workers int) FleetOptions {
	e := mockengine.DefaultConfig()
	e.Speedup = 20
	e.TotalKVBlocks = 2048
	return FleetOptions{Workers: workers, BlockSize: 16, Engine: e, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// Two real mock workers behind round-robin: the second visit of a prompt
// to the same worker hits its prefix cache, and the client sees it.
func TestWorkersOnlyFleetRoundRobin(t *testing.T) {
	ctx := context.Background()
	ws, err := startWorkers(ctx, fastFleetOptions(2), nil)
	if err != nil {
		t.Fatal(err)
	}
	fleet := &workersOnly{ws: ws}
	defer fleet.Close(ctx)
	prompts, _ := SharedPrefixPrompts(SharedPrefixConfig{Groups: 1, PromptsPerGroup: 1, SystemTokens: 256, QuestionTokens: 8, OutputTokens: 4}, 4, 1)
	reqs, _ := PoissonSchedule(prompts, 50, 1)
	for i := range reqs {
		reqs[i].Arrival = time.Duration(i) * 30 * time.Millisecond // sequential: each finishes before the next
	}
	d, _ := NewDispatcher(PolicyRoundRobin, nil, fleet.WorkerURLs(), 1)
	results := Run(ctx, reqs, d, &Client{HTTP: newHTTPClient(), Model: "mock-model"}, 10*time.Second)
	p := Summarize(PolicyRoundRobin, 50, results)
	if p.Errors != 0 {
		t.Fatalf("errors: %v", results[0].Err)
	}
	// Requests 0 and 1 are cold on their worker; 2 and 3 hit 256 tokens.
	want := float64(2*256) / float64(4*264)
	if p.HitRate != want {
		t.Fatalf("hit rate %v, want %v", p.HitRate, want)
	}
	for i, r := range results {
		if r.OutputTokens != 4 || len(r.ITLs) == 0 && r.OutputTokens > 1 {
			t.Fatalf("request %d: %d tokens, %d gaps", i, r.OutputTokens, len(r.ITLs))
		}
	}
	if err := fleet.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}
