package actors

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/messages"
)

func TestTickGateWakesOnlyWhenTurningBusy(t *testing.T) {
	g := newTickGate()
	if got := g.period(20 * time.Millisecond); got != idleTick {
		t.Fatalf("idle period %v, want %v", got, idleTick)
	}
	g.set(false)
	if len(g.wake) != 0 {
		t.Fatal("staying idle woke the ticker")
	}
	g.set(true)
	g.set(true)
	if len(g.wake) != 1 {
		t.Fatalf("turning busy queued %d wakes, want 1", len(g.wake))
	}
	if got := g.period(20 * time.Millisecond); got != 20*time.Millisecond {
		t.Fatalf("busy period %v", got)
	}
	<-g.wake
	g.set(false)
	g.set(true)
	g.set(false)
	g.set(true) // the wake from the first transition is still queued
	if len(g.wake) != 1 {
		t.Fatalf("%d wakes queued, want 1", len(g.wake))
	}
	if got := g.period(2 * time.Second); got != 2*time.Second {
		t.Fatalf("a tick interval above the idle period is kept: got %v", got)
	}
}

// An idle scheduler is ticked once a second, but a decision that starts
// during that second still times out on time: turning busy wakes the
// ticker. Without the wake this decision waits for the idle tick (~1 s).
func TestDecisionTimeoutAfterAnIdlePeriod(t *testing.T) {
	r, tokens := twoShardFixture(t, nil)
	for i := range 3 {
		time.Sleep(100 * time.Millisecond) // the ticker is now in its idle second
		if r.gate.busy.Load() {
			t.Fatal("the scheduler reports deadlines with nothing in flight")
		}
		stalled := make(chan struct{})
		r.system.Root.Send(r.shards[shardOf(1, 2)], &stallShard{d: 900 * time.Millisecond, entered: stalled})
		<-stalled
		start := time.Now()
		if _, err := r.Route(ctxT(t), &messages.RouteRequest{TokenIds: tokens}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Fatalf("round %d: the decision waited %v for its 50 ms timeout", i, took)
		}
		time.Sleep(900 * time.Millisecond) // let the stalled shard recover
	}
}

// Housekeeping keeps its once-a-second pace while the scheduler turns busy
// and idle much faster than TickInterval (a replica answering a stream of
// requests). A wake only brings the next tick forward: when every wake
// restarted the timer instead, ticks stopped for as long as the trickle
// lasted, and heartbeat expiry and drained workers' removal with them.
func TestHousekeepingWhileTheSchedulerFlipsBusy(t *testing.T) {
	r := startRouter(t, func(c *Config) { c.HeartbeatTimeout = 200 * time.Millisecond })
	if err := r.AnnounceWorker(&messages.WorkerHeartbeat{WorkerId: 1, DataParallelSize: 1}, false); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, r, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // as the scheduler does after each message of a trickle
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				r.gate.set(true)
				r.gate.set(false)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	start := time.Now()
	for {
		reg, err := r.Registry(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(reg.Workers) == 0 {
			t.Logf("the silent worker expired after %v", time.Since(start))
			return
		}
		if time.Since(start) > 4*time.Second {
			t.Fatal("no heartbeat expiry in 4 s: housekeeping did not run")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
