package natsbus

import (
	"context"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
)

type gapRecorder struct {
	mu   sync.Mutex
	gaps map[kv.WorkerWithDpRank][]uint64
}

func (g *gapRecorder) GapOpened(w kv.WorkerWithDpRank, missed uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gaps[w] = append(g.gaps[w], missed)
}
func (g *gapRecorder) ReplayCompleted(kv.WorkerWithDpRank)      {}
func (g *gapRecorder) ReplayFailed(kv.WorkerWithDpRank, string) {}

// Event-id gaps are reported to index trust per (worker, dp rank), with
// the ids lost; a step back (a restart) and the next id are not gaps.
func TestEventIDGapsReachTrust(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	var c collector
	rec := &gapRecorder{gaps: map[kv.WorkerWithDpRank][]uint64{}}
	src, err := StartEventSource(context.Background(), nc, EventSourceConfig{Subject: "kv.trust", Log: quiet, Trust: rec}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	msgs := []string{
		`{"worker_id":1,"event":{"event_id":1,"dp_rank":0,"data":"cleared"}}`,
		`{"worker_id":1,"event":{"event_id":1,"dp_rank":1,"data":"cleared"}}`,
		`{"worker_id":1,"event":{"event_id":2,"dp_rank":0,"data":"cleared"}}`,
		`{"worker_id":1,"event":{"event_id":5,"dp_rank":1,"data":"cleared"}}`, // rank 1 lost 3
		`{"worker_id":1,"event":{"event_id":1,"dp_rank":0,"data":"cleared"}}`, // rank 0 restarted
		`{"worker_id":1,"event":{"event_id":2,"dp_rank":0,"data":"cleared"}}`,
	}
	for _, m := range msgs {
		if err := nc.Publish("kv.trust", []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, waitTimeout, "all events", func() bool { return c.len() == len(msgs) })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r0, r1 := kv.WorkerWithDpRank{WorkerID: 1}, kv.WorkerWithDpRank{WorkerID: 1, DpRank: 1}
	if len(rec.gaps) != 1 || len(rec.gaps[r1]) != 1 || rec.gaps[r1][0] != 3 || rec.gaps[r0] != nil {
		t.Fatalf("gaps reported %v, want only rank 1 with 3 lost", rec.gaps)
	}
}
