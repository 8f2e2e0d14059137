package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

func waitTrust(t *testing.T, r *Router, w kv.WorkerWithDpRank, state, reason string) {
	t.Helper()
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if got := r.IndexTrust(w); got.State != state || reason != "" && got.Reason != reason {
			return fmt.Errorf("%s trust %+v, want %s (%s)", w, got, state, reason)
		}
		return nil
	})
}

func deviceOverlap(t *testing.T, r *Router, tokens []uint32, w kv.WorkerWithDpRank) uint32 {
	t.Helper()
	reply, err := r.OverlapScores(context.Background(), tokens, "")
	if err != nil {
		t.Fatal(err)
	}
	ranks := reply.GetRanks()
	for i := range ranks.GetWorkerIds() {
		if ranks.WorkerIds[i] == uint64(w.WorkerID) && ranks.DpRanks[i] == w.DpRank {
			return ranks.DeviceBlocks[i]
		}
	}
	return 0
}

// An untrusted rank is scored from the blocks predicted by routing
// decisions (approximate mode's rule), not from its event index; a
// completed replay restores the index's scores. The state shows in
// Status.
func TestUntrustedRankScoredFromPredictions(t *testing.T) {
	for _, ttl := range []time.Duration{0, 30 * time.Second} {
		t.Run(fmt.Sprintf("router-predicted-ttl %s", ttl), func(t *testing.T) { untrustedScoredFromPredictions(t, ttl) })
	}
}

// untrustedScoredFromPredictions: with a predicted TTL, predictions also
// extend exact ranks' matches (Dynamo's predict-on-route), so after the
// restore the routed prompt still scores there.
func untrustedScoredFromPredictions(t *testing.T, predictedTTL time.Duration) {
	r := startRouter(t, func(c *Config) { c.Index.PredictedTTL = predictedTTL })
	register(t, r, 1, 2)
	waitWorkers(t, r, 2)
	w1 := kv.WorkerWithDpRank{WorkerID: 1}
	indexed := prompt(160, 1) // 10 blocks, announced by worker 1's events
	storeChain(r, w1, indexed)
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := deviceOverlap(t, r, indexed, w1); n != 10 {
			return fmt.Errorf("indexed overlap %d, want 10", n)
		}
		return nil
	})

	r.ReplayFailed(w1, "test")
	waitTrust(t, r, w1, "untrusted", "replay_failed")
	if n := deviceOverlap(t, r, indexed, w1); n != 0 {
		t.Fatalf("untrusted rank still scored from its index: overlap %d, want 0 (nothing predicted)", n)
	}
	// A request routed to the untrusted rank predicts its blocks there.
	routed := prompt(96, 2) // 6 blocks
	reply, err := r.Route(ctxT(t), &messages.RouteRequest{RequestId: "r1", TokenIds: routed, UpdateStates: true,
		PinnedWorker: rankMsg(w1)})
	if err != nil || rankOf(reply.Worker) != w1 {
		t.Fatalf("route: %v, %v", reply, err)
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := deviceOverlap(t, r, routed, w1); n != 6 {
			return fmt.Errorf("predicted overlap %d, want 6", n)
		}
		return nil
	})
	st, err := r.Status(ctxT(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Workers[0].Ranks[0].IndexTrust; got.State != "untrusted" || got.Reason != "replay_failed" || got.Detail != "test" {
		t.Fatalf("status trust %+v", got)
	}
	if got := st.Workers[1].Ranks[0].IndexTrust.State; got != "exact" {
		t.Fatalf("worker 2 trust %s, want exact", got)
	}
	if st.IndexTrustTransitions["untrusted/replay_failed"] != 1 {
		t.Fatalf("transitions %v", st.IndexTrustTransitions)
	}

	r.ReplayCompleted(w1)
	waitTrust(t, r, w1, "exact", "")
	if n := deviceOverlap(t, r, indexed, w1); n != 10 {
		t.Fatalf("restored rank's overlap %d, want the index's 10", n)
	}
	want := uint32(0)
	if predictedTTL > 0 {
		want = 6
	}
	if n := deviceOverlap(t, r, routed, w1); n != want {
		t.Fatalf("restored rank's overlap for the routed prompt %d, want %d", n, want)
	}
}

// A rank routed requests for StaleAfter with no KV event is untrusted;
// an event arriving (no gap) lifts it.
func TestStaleStreamUntrusted(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.Trust.StaleAfter = 500 * time.Millisecond })
	register(t, r, 1)
	waitWorkers(t, r, 1)
	w1 := kv.WorkerWithDpRank{WorkerID: 1}
	storeChain(r, w1, prompt(32, 9))
	start := time.Now()
	for i := 0; r.IndexTrust(w1).State == "exact"; i++ {
		if time.Since(start) > 5*time.Second {
			t.Fatal("a silent rank serving requests never went untrusted")
		}
		id := fmt.Sprintf("s%d", i)
		if _, err := r.Route(ctxT(t), &messages.RouteRequest{RequestId: id, TokenIds: prompt(32, uint32(i+10)), UpdateStates: true}); err != nil {
			t.Fatal(err)
		}
		if err := r.Free(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := r.IndexTrust(w1); got.State != "untrusted" || got.Reason != "stale_stream" {
		t.Fatalf("trust %+v, want untrusted (stale_stream)", got)
	}
	if el := time.Since(start); el < 500*time.Millisecond {
		t.Fatalf("untrusted after %s, before StaleAfter", el)
	}
	storeChain(r, w1, prompt(32, 99))
	waitTrust(t, r, w1, "exact", "")
}

// Refused events degrade a rank; enough of them in a window untrust it;
// a Cleared of that rank restores it.
func TestRefusedEventsAndClear(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.Trust.RefusedUntrusted = 3 })
	register(t, r, 1)
	waitWorkers(t, r, 1)
	w1 := kv.WorkerWithDpRank{WorkerID: 1}
	orphan := func(i int) *kv.Event {
		return &kv.Event{Worker: w1, Kind: kv.EventStored, HasParent: true, ParentHash: kv.ExternalBlockHash(0xdead0000 + uint64(i)),
			Blocks: []kv.StoredBlock{{BlockHash: kv.ExternalBlockHash(0xbeef0000 + uint64(i)), TokensHash: 1}}}
	}
	r.ApplyEvent(orphan(0))
	waitTrust(t, r, w1, "degraded", "refused_events")
	r.ApplyEvent(orphan(1))
	r.ApplyEvent(orphan(2))
	waitTrust(t, r, w1, "untrusted", "refused_events")
	r.ApplyEvent(&kv.Event{Worker: w1, Kind: kv.EventCleared})
	waitTrust(t, r, w1, "exact", "")
}

// Parity reports (the proxy's predicted vs confirmed cached tokens)
// untrust a rank whose predicted hits the engine does not confirm; a
// clean window restores it.
func TestParityDriftAndCleanWindow(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.Trust.ParityWindow = 4 })
	register(t, r, 1)
	waitWorkers(t, r, 1)
	w1 := kv.WorkerWithDpRank{WorkerID: 1}
	for range 4 {
		r.ObserveParity(w1, 128, 16, time.Now())
	}
	waitTrust(t, r, w1, "untrusted", "parity_drift")
	for range 4 {
		r.ObserveParity(w1, 128, 128, time.Now())
	}
	waitTrust(t, r, w1, "exact", "")
}

// Approximate mode has no events to judge, and --index-trust=false turns
// the rules off: every rank stays exact whatever is reported.
func TestTrustOffInApproxModeOrDisabled(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"approximate mode": func(c *Config) { c.UseKVEvents = false },
		"disabled":         func(c *Config) { c.Trust.Enabled = false },
	} {
		t.Run(name, func(t *testing.T) {
			r := startRouter(t, mutate)
			register(t, r, 1)
			waitWorkers(t, r, 1)
			w1 := kv.WorkerWithDpRank{WorkerID: 1}
			r.ReplayFailed(w1, "test")
			if err := r.Barrier(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			if got := r.IndexTrust(w1); got.State != "exact" || r.trust != nil {
				t.Fatalf("trust %+v (actor %v)", got, r.trust)
			}
		})
	}
}

// A peer replica's request that makes the engine store blocks counts
// here too: replicas agree that a silent stream is stale even when only
// one of them routes to the rank.
func TestStaleFromPeersRequests(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.Trust.StaleAfter = 500 * time.Millisecond })
	register(t, r, 1, 2)
	waitWorkers(t, r, 2)
	w1, w2 := kv.WorkerWithDpRank{WorkerID: 1}, kv.WorkerWithDpRank{WorkerID: 2}
	start := time.Now()
	r.ApplyRemote(&messages.SequenceEvent{Origin: "peer", Data: &messages.SequenceEvent_Add{Add: &messages.AddRequest{
		RequestId: "peer-1", Worker: rankMsg(w1), SequenceHashes: []uint64{42, 43, 44, 45}, PromptBlocks: 4, Isl: 64, Stride: 1,
		PrefillTokens: 64, TrackPrefillTokens: true}}})
	waitTrust(t, r, w1, "untrusted", "stale_stream")
	if el := time.Since(start); el < 500*time.Millisecond {
		t.Fatalf("untrusted after %s, before StaleAfter", el)
	}
	if got := r.IndexTrust(w2); got.State != "exact" {
		t.Fatalf("an idle rank went %+v", got)
	}
}

// Requests whose every block the index counts as cached make the engine
// store nothing, so no event is owed: a rank serving only those for
// longer than StaleAfter stays exact.
func TestCachedRequestsOweNoEvents(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.Trust.StaleAfter = 300 * time.Millisecond })
	register(t, r, 1)
	waitWorkers(t, r, 1)
	w1 := kv.WorkerWithDpRank{WorkerID: 1}
	cached := prompt(32, 3)
	storeChain(r, w1, cached)
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := deviceOverlap(t, r, cached, w1); n != 2 {
			return fmt.Errorf("overlap %d, want 2", n)
		}
		return nil
	})
	for i := range 30 {
		id := fmt.Sprintf("c%d", i)
		if _, err := r.Route(ctxT(t), &messages.RouteRequest{RequestId: id, TokenIds: cached, UpdateStates: true}); err != nil {
			t.Fatal(err)
		}
		if err := r.Free(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := r.IndexTrust(w1); got.State != "exact" {
		t.Fatalf("a rank serving only cached prompts went %+v", got)
	}
}
