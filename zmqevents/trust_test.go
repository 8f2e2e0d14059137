package zmqevents_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// trustRecorder is a trust.StreamObserver that keeps what it heard.
type trustRecorder struct {
	mu                     sync.Mutex
	gaps, missed, ok, fail int
	reasons                []string
}

func (r *trustRecorder) GapOpened(_ kv.WorkerWithDpRank, missed uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gaps++
	r.missed += int(missed)
}

func (r *trustRecorder) ReplayCompleted(kv.WorkerWithDpRank) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ok++
}

func (r *trustRecorder) ReplayFailed(_ kv.WorkerWithDpRank, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail++
	r.reasons = append(r.reasons, reason)
}

func (r *trustRecorder) counts() (gaps, ok, fail int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gaps, r.ok, r.fail
}

// Every gap the SUB socket shows is reported to index trust, and every
// replay that filled it as completed (none failed).
func TestZMQGapsAndReplaysReachTrust(t *testing.T) {
	r := newRig(t, zmqevents.EncodingArray, func(_ uint32, seq uint64) bool { return seq > 20 && seq%7 == 3 })
	r.workload(200)
	r.publish(kv.Event{Worker: r.engine.worker, Kind: kv.EventRemoved})
	r.waitConverged()
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		gaps, ok, fail := r.trust.counts()
		if gaps == 0 || ok < gaps+1 || fail != 0 { // +1: the replay at connect
			return fmt.Errorf("trust heard %d gaps, %d replays completed, %d failed", gaps, ok, fail)
		}
		return nil
	})
}

// A replay endpoint that does not answer: the replay fails and trust
// hears it (the rank's index misses what the gap lost).
func TestZMQReplayFailureReachesTrust(t *testing.T) {
	rec := &trustRecorder{}
	pub, err := mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{
		Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", BlockSize: blockSize,
		Encoding: zmqevents.EncodingArray,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	sub, err := zmqevents.StartSubscriber(context.Background(), zmqevents.WorkerEndpoint{
		WorkerID: 9, Endpoint: pub.Endpoint(), ReplayEndpoint: "tcp://127.0.0.1:1", // nobody answers replays
	}, zmqevents.Options{BlockSize: blockSize, ReplayTimeout: 200 * time.Millisecond, Trust: rec,
		Logger: slog.New(slog.DiscardHandler), Handler: func(*kv.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.fail == 0 || rec.reasons[0] != "replay_error" || rec.ok != 0 {
			return fmt.Errorf("replay failures %d (%v), completions %d", rec.fail, rec.reasons, rec.ok)
		}
		return nil
	})
}
