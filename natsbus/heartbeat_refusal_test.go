package natsbus

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/internal/testutil"
)

// A worker whose block size is not the router's announces itself every
// second; it is refused and counted every time, but logged at ERROR once
// (then at most once a minute), not once a second. A worker whose block
// size matches is handed on.
func TestHeartbeatBlockSizeRefusalIsLoggedOncePerWorker(t *testing.T) {
	e := startServer(t)
	nc := dial(t, e)
	logs := &testutil.SyncBuffer{}
	var mu sync.Mutex
	rejected := map[uint64]int{}
	got := make(chan events.Heartbeat, 16)
	h, err := StartHeartbeatSourceWith(nc, HeartbeatSourceConfig{
		Subject: "workers", Log: slog.New(slog.NewTextHandler(logs, nil)), BlockSize: 16,
		OnReject: func(hb events.Heartbeat, reason string) {
			if reason != ReasonBlockSizeMismatch {
				t.Errorf("reason %q", reason)
			}
			mu.Lock()
			rejected[hb.WorkerID]++
			mu.Unlock()
		},
	}, func(hb events.Heartbeat) { got <- hb })
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for range 5 {
		for _, w := range []uint64{7, 8} {
			_ = nc.Publish("workers", fmt.Appendf(nil, `{"worker_id":%d,"url":"http://w","block_size":32}`, w))
		}
	}
	_ = nc.Publish("workers", []byte(`{"worker_id":9,"url":"http://w","block_size":16}`))
	testutil.Eventually(t, waitTimeout, "ten refusals", func() bool { return h.Rejected() == 10 })
	if hb := <-got; hb.WorkerID != 9 {
		t.Fatalf("handed on %+v, want worker 9", hb)
	}
	mu.Lock()
	if rejected[7] != 5 || rejected[8] != 5 {
		t.Fatalf("OnReject saw %v", rejected)
	}
	mu.Unlock()
	lines := 0
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(line, "block size differs") {
			lines++
			if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "reason=block_size_mismatch") {
				t.Fatalf("refusal line %q", line)
			}
		}
	}
	if lines != 2 {
		t.Fatalf("%d refusal lines for 10 refused heartbeats of 2 workers, want 2:\n%s", lines, logs.String())
	}
}
