package actors

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// logBuffer collects log output from actor goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func registerDP(t testing.TB, r *Router, id uint64, dp uint32) {
	t.Helper()
	hb := &messages.WorkerHeartbeat{WorkerId: id, Url: fmt.Sprintf("http://w%d", id), DataParallelSize: dp}
	if err := r.RegisterWorker(hb, true); err != nil {
		t.Fatal(err)
	}
}

// An event from a dp rank the registered worker does not have (rank 5 of
// a dp=2 worker) would be indexed under a rank nobody routes to: it is
// refused, counted as unknown_rank and logged at WARN naming the worker,
// the rank and the reason. Held events of a worker that then registers
// are checked against the ranks it registered with.
func TestEventOfUnknownRankIsRefused(t *testing.T) {
	obs := &dropObserver{dropped: map[string]int{}}
	logs := &logBuffer{}
	r := startRouter(t, func(c *Config) {
		c.Shards = 1
		c.Observer = obs
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	registerDP(t, r, 9, 2)
	storeChain(r, kv.WorkerWithDpRank{WorkerID: 9, DpRank: 5}, prompt(128, 1))
	storeChain(r, kv.WorkerWithDpRank{WorkerID: 9, DpRank: 1}, prompt(128, 2))
	// Worker 10 is not registered yet: both its events wait.
	storeChain(r, kv.WorkerWithDpRank{WorkerID: 10, DpRank: 0}, prompt(64, 3))
	storeChain(r, kv.WorkerWithDpRank{WorkerID: 10, DpRank: 3}, prompt(64, 4))
	if err := r.Barrier(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if n := obs.count(reasonUnknownRank); n != 1 {
		t.Fatalf("dropped %v, want one unknown_rank", obs.dropped)
	}
	if n := indexedBlocks(t, r, kv.WorkerWithDpRank{WorkerID: 9, DpRank: 5}); n != 0 {
		t.Fatalf("rank 5 of a dp=2 worker indexed %d blocks", n)
	}
	if n := indexedBlocks(t, r, kv.WorkerWithDpRank{WorkerID: 9, DpRank: 1}); n != 8 {
		t.Fatalf("rank 1 indexed %d blocks, want 8", n)
	}
	line := ""
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "reason="+reasonUnknownRank) {
			line = l
			break
		}
	}
	for _, want := range []string{"level=WARN", "worker=9", "dp_rank=5"} {
		if !strings.Contains(line, want) {
			t.Fatalf("no WARN line naming %q for the refused event; log:\n%s", want, logs.String())
		}
	}

	registerDP(t, r, 10, 2)
	testutil.Eventually(t, 5*time.Second, "held rank-0 event applied, held rank-3 event refused", func() bool {
		return indexedBlocks(t, r, kv.WorkerWithDpRank{WorkerID: 10, DpRank: 0}) == 4 && obs.count(reasonUnknownRank) == 2
	})
	if n := indexedBlocks(t, r, kv.WorkerWithDpRank{WorkerID: 10, DpRank: 3}); n != 0 {
		t.Fatalf("held event of rank 3 indexed %d blocks", n)
	}
}

// A Cleared from one dp rank, through the actors, leaves the worker's
// other ranks and their later stores.
func TestClearedFromOneRankKeepsTheOthers(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.Shards = 1 })
	registerDP(t, r, 7, 3)
	for dp := range uint32(3) {
		storeChain(r, kv.WorkerWithDpRank{WorkerID: 7, DpRank: dp}, prompt(128, 1))
	}
	r.ApplyEvent(&kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 7, DpRank: 1}, EventID: 9, Kind: kv.EventCleared})
	storeChain(r, kv.WorkerWithDpRank{WorkerID: 7, DpRank: 2}, prompt(160, 1)) // extends rank 2's chain from the root
	if err := r.Barrier(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for dp, want := range []uint64{8, 0, 10} {
		if n := indexedBlocks(t, r, kv.WorkerWithDpRank{WorkerID: 7, DpRank: uint32(dp)}); n != want {
			t.Fatalf("rank %d holds %d blocks after rank 1 cleared, want %d", dp, n, want)
		}
	}
}
