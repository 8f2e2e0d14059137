package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// pinnedDispatcher runs mailboxes on a few long-lived goroutines.
// protoactor's default dispatcher starts a goroutine each time an idle
// mailbox gets a message; the scheduler's and the shards' mailboxes go
// idle between decisions, and every new goroutine grew its stack from the
// minimum again through the decision path's deep calls: copying stacks
// took ~15% of a decision's CPU (BenchmarkScheduleActorStride8's
// profile). Here the goroutines, and their grown stacks, stay.
//
// A mailbox is never run twice at once (protoactor guarantees it), so a
// pool of n goroutines serves any number of mailboxes. Schedule never
// blocks: with every goroutine busy and the queue full, or after Close, it
// falls back to a fresh goroutine as the default dispatcher does.
type pinnedDispatcher struct {
	throughput int
	work       chan func()

	mu     sync.RWMutex
	closed bool
}

var _ actor.Dispatcher = (*pinnedDispatcher)(nil)

// defaultThroughput is protoactor's: messages a mailbox run processes
// before yielding the goroutine.
const defaultThroughput = 300

func newPinnedDispatcher(goroutines, throughput int) *pinnedDispatcher {
	d := &pinnedDispatcher{throughput: throughput, work: make(chan func(), 1024)}
	for range max(goroutines, 1) {
		go func() {
			for run := range d.work {
				run()
			}
		}()
	}
	return d
}

func (d *pinnedDispatcher) Schedule(run func()) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if !d.closed {
		select {
		case d.work <- run:
			return
		default:
		}
	}
	go run()
}

func (d *pinnedDispatcher) Throughput() int { return d.throughput }

// Close ends the goroutines once the queued runs are done; later runs
// get goroutines of their own.
func (d *pinnedDispatcher) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.work)
	}
}
