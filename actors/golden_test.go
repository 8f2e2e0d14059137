package actors

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden/*.txt from the scheduler's decisions")

// goldenCase is one configuration the recorded workload is routed under.
type goldenCase struct {
	name   string
	cost   scheduling.CostModel
	temp   float64
	disagg bool
	// explain routes with a debug logger, so every decision builds its
	// route receipt: the transcript must not change (file names the
	// recorded transcript).
	explain bool
	file    string
	// policy names a policy file (decide/testdata/policies) whose
	// pipelines the Decider runs instead of the flags' default.
	policy string
}

var goldenCases = []goldenCase{
	{name: "dynamo", cost: scheduling.CostDynamo},
	{name: "dynamo_t05", cost: scheduling.CostDynamo, temp: 0.5},
	{name: "ttft", cost: scheduling.CostTTFT},
	{name: "ttft_t03", cost: scheduling.CostTTFT, temp: 0.3},
	{name: "disagg", cost: scheduling.CostDynamo, disagg: true},
	{name: "ttft_t03_explained", cost: scheduling.CostTTFT, temp: 0.3, explain: true, file: "ttft_t03"},
	// The default pipeline written out as a policy file decides the same,
	// bit for bit.
	{name: "dynamo_policy_file", cost: scheduling.CostDynamo, policy: "default.yaml", file: "dynamo"},
	{name: "ttft_t03_policy_file", cost: scheduling.CostTTFT, temp: 0.3, policy: "default.yaml", file: "ttft_t03"},
	{name: "disagg_policy_file", cost: scheduling.CostDynamo, disagg: true, policy: "default.yaml", file: "disagg"},
}

// TestGoldenDecisions routes a seeded workload (several workers and dp
// ranks, stored prefixes, loads that build up and drain, sticky sessions,
// pinned and allowed-worker requests, a busy worker) through a real router
// whose random source is seeded, one request at a time, and compares every
// decision (rank, overlap, cached tokens, prefill rank) with the recorded
// file in testdata/golden. The workload waits for each step's effects to
// reach the scheduler's load board, and the ttft cost runs with a prefill
// rate so high that a rank's head request is always done (the wall clock
// cannot move a cost), so the decisions are a function of the workload and
// the seed alone. -update-golden rewrites the files.
func TestGoldenDecisions(t *testing.T) {
	for _, gc := range goldenCases {
		t.Run(gc.name, func(t *testing.T) {
			got := runGolden(t, gc)
			file := gc.name
			if gc.file != "" {
				file = gc.file
			}
			path := filepath.Join("testdata", "golden", file+".txt")
			if *updateGolden && gc.file == "" {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update-golden to record)", err)
			}
			if got != string(want) {
				gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
				for i := range min(len(gl), len(wl)) {
					if gl[i] != wl[i] {
						t.Fatalf("%s:%d differs\n got: %s\nwant: %s", path, i+1, gl[i], wl[i])
					}
				}
				t.Fatalf("%s: %d lines, want %d", path, len(gl), len(wl))
			}
		})
	}
}

// runGolden routes the workload and returns its transcript.
func runGolden(t *testing.T, gc goldenCase) string {
	var receipts strings.Builder
	if gc.explain {
		t.Cleanup(func() {
			if n := strings.Count(receipts.String(), `"msg":"route receipt"`); n < 50 || !strings.Contains(receipts.String(), `"margin"`) {
				t.Errorf("%d route receipts logged, want one a decision", n)
			}
		})
	}
	r := startRouter(t, func(c *Config) {
		if gc.explain {
			c.Logger = slog.New(slog.NewJSONHandler(&lockedWriter{w: &receipts}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		c.rngSeed = &[2]uint64{7, 11}
		if gc.policy != "" {
			c.Pipeline, c.Models = policyPipelines(t, gc.policy)
		}
		c.Scheduling.RouterCost = gc.cost
		c.Scheduling.RouterTemperature = gc.temp
		c.Scheduling.TTFT.PrefillTokensPerSec = 1e12
		c.Scheduling.MaxLocalPrefillLength = 64
	})
	var out strings.Builder
	logf := func(format string, a ...any) { fmt.Fprintf(&out, format+"\n", a...) }
	type worker struct {
		id, dp, blocks uint64
		role           kv.Role
	}
	workers := []worker{{1, 2, 0, kv.RoleBoth}, {2, 1, 96, kv.RoleBoth}, {3, 2, 0, kv.RoleBoth}, {4, 1, 64, kv.RoleBoth}}
	if gc.disagg {
		workers[0].role, workers[2].role = kv.RolePrefill, kv.RoleDecode
	}
	var ranks []kv.WorkerWithDpRank
	for _, w := range workers {
		hb := &messages.WorkerHeartbeat{WorkerId: w.id, DataParallelSize: uint32(w.dp), TotalKvBlocks: w.blocks,
			MaxNumBatchedTokens: 1 << 20, Role: messages.WorkerRole(w.role)}
		if err := r.RegisterWorker(hb, true); err != nil {
			t.Fatal(err)
		}
		for dp := range w.dp {
			ranks = append(ranks, kv.WorkerWithDpRank{WorkerID: kv.WorkerID(w.id), DpRank: uint32(dp)})
		}
		logf("worker %d dp=%d kv_blocks=%d role=%s", w.id, w.dp, w.blocks, w.role)
	}
	waitWorkers(t, r, len(workers))
	groups := 6
	tokens := func(g, n int) []uint32 { return prompt(n, uint32(g+1)) }
	sync := func() {
		t.Helper()
		// Every rank answers after it applied what the scheduler sent it,
		// and its publication overtakes the reply: the board is current.
		if _, _, err := r.ActiveRequests(ctxT(t), nil); err != nil {
			t.Fatal(err)
		}
		if err := r.Barrier(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	store := func(w kv.WorkerWithDpRank, g, n int) {
		storeChain(r, w, tokens(g, n))
		sync()
		logf("store %s g%d tokens=%d", w, g, n)
	}
	for i, w := range ranks {
		store(w, i%groups, 32+32*i)
	}

	rng := rand.New(rand.NewPCG(2024, 31))
	type live struct {
		id        string
		rank      kv.WorkerWithDpRank
		prefilled bool
	}
	var active []live
	prefills := map[kv.WorkerWithDpRank]int{} // prefill completions per rank: fewer than a rate needs
	busy := false
	for n := range 140 {
		switch x := rng.Float64(); {
		case x < 0.55:
			id := fmt.Sprintf("r%d", n)
			g := rng.IntN(groups)
			req := &messages.RouteRequest{RequestId: id, TokenIds: tokens(g, 17+rng.IntN(220)), UpdateStates: rng.Float64() > 0.1}
			desc := fmt.Sprintf("route %s g%d tokens=%d update=%v", id, g, len(req.TokenIds), req.UpdateStates)
			if rng.Float64() < 0.3 {
				req.SessionId = fmt.Sprintf("s%d", rng.IntN(4))
				desc += " session=" + req.SessionId
			}
			switch y := rng.Float64(); {
			case y < 0.06:
				w := ranks[rng.IntN(len(ranks))]
				req.PinnedWorker = rankMsg(w)
				desc += fmt.Sprintf(" pinned=%s", w)
			case y < 0.16:
				a, b := uint64(1+rng.IntN(4)), uint64(1+rng.IntN(4))
				req.AllowedWorkerIds = []uint64{a, b}
				desc += fmt.Sprintf(" allowed=%d,%d", a, b)
			}
			reply, err := r.Route(ctxT(t), req)
			if err != nil {
				logf("%s -> error %v", desc, err)
				break
			}
			w := rankOf(reply.Worker)
			desc += fmt.Sprintf(" -> %s overlap=%d cached=%d", w, reply.OverlapBlocks, reply.CachedTokens)
			if reply.PrefillWorker != nil {
				desc += fmt.Sprintf(" prefill=%s prefill_overlap=%d prefill_cached=%d", rankOf(reply.PrefillWorker),
					reply.PrefillOverlapBlocks, reply.PrefillCachedTokens)
				if req.UpdateStates {
					// The prefill hop's answer arrives: it is freed.
					if err := r.Free(ctxT(t), reply.PrefillRequestId); err != nil {
						t.Fatal(err)
					}
				}
			}
			logf("%s", desc)
			if req.UpdateStates {
				active = append(active, live{id: id, rank: w})
			}
			sync()
		case x < 0.75 && len(active) > 0:
			k := rng.IntN(len(active))
			if err := r.Free(ctxT(t), active[k].id); err != nil {
				t.Fatal(err)
			}
			logf("free %s", active[k].id)
			active = slices.Delete(active, k, k+1)
			sync()
		case x < 0.87 && len(active) > 0:
			k := rng.IntN(len(active))
			a := &active[k]
			if a.prefilled || prefills[a.rank] >= scheduling.PrefillRateMinSamples-1 {
				break
			}
			if err := r.MarkPrefillCompleted(ctxT(t), a.id); err != nil {
				t.Fatal(err)
			}
			a.prefilled = true
			prefills[a.rank]++
			logf("prefill_done %s", a.id)
			sync()
		case x < 0.94:
			store(ranks[rng.IntN(len(ranks))], rng.IntN(groups), 16*(1+rng.IntN(12)))
		default:
			busy = !busy
			if _, _, err := r.SetWorkerCondition(ctxT(t), 3, kv.WorkerBusy, busy, nil, "golden"); err != nil {
				t.Fatal(err)
			}
			sync()
			logf("condition 3 busy %v", busy)
		}
	}
	return out.String()
}

// lockedWriter serialises the actors' log writes into one buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
