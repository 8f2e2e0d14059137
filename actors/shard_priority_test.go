package actors

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// turnLog records the messages a shard processed, in order.
type turnLog struct {
	mu    sync.Mutex
	turns []string
}

func (l *turnLog) middleware(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
		l.mu.Lock()
		l.turns = append(l.turns, fmt.Sprintf("%T", env.Message))
		l.mu.Unlock()
		next(ctx, env)
	}
}

func (l *turnLog) reset() {
	l.mu.Lock()
	l.turns = nil
	l.mu.Unlock()
}

// before counts the turns of kind taken before the first turn of mark.
func (l *turnLog) before(mark, kind string) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, t := range l.turns {
		switch t {
		case mark:
			return n, true
		case kind:
			n++
		}
	}
	return n, false
}

// A score request (sent as a request, with its sender in an envelope, as
// the scheduler sends it) overtakes the KV events queued in the shard's
// mailbox before it: the shard answers it on its next turn, from the
// index as it is, and applies the events afterwards, none lost.
func TestScoreOvertakesQueuedEvents(t *testing.T) {
	const queued = 500
	log := &turnLog{}
	r := startRouter(t, func(c *Config) {
		c.Shards = 1
		c.shardMiddleware = append(c.shardMiddleware, log.middleware)
	})
	register(t, r, 1)
	waitWorkers(t, r, 1)
	w := kv.WorkerWithDpRank{WorkerID: 1}
	first := prompt(4*testBlockSize, 1)
	storeChain(r, w, first)
	if err := r.Barrier(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	log.reset()
	release := make(chan struct{})
	r.system.Root.Send(r.shards[0], &holdShard{release: release})
	last := first
	for i := range queued {
		last = prompt(4*testBlockSize, uint32(i+2))
		storeChain(r, w, last)
	}
	score := func(tokens []uint32) *actor.Future {
		local := hashing.BlockHashes(tokens, testBlockSize, hashing.Options{})
		q := &messages.ScoreRequest{QueryId: 7, LocalHashes: make([]uint64, len(local))}
		for i, h := range local {
			q.LocalHashes[i] = uint64(h)
		}
		return r.system.Root.RequestFuture(r.shards[0], q, 5*time.Second)
	}
	early, late := score(first), score(last)
	close(release)

	overlap := func(f *actor.Future) uint32 {
		t.Helper()
		res, err := f.Result()
		if err != nil {
			t.Fatal(err)
		}
		var device uint32
		for _, d := range res.(*messages.OverlapReply).GetRanks().GetDeviceBlocks() {
			device = max(device, d)
		}
		return device
	}
	if got := overlap(early); got != 4 {
		t.Fatalf("score of the chain indexed before the backlog: overlap %d, want 4", got)
	}
	if got := overlap(late); got != 0 {
		t.Fatalf("score answered after the queued events were applied: overlap %d, want 0", got)
	}
	n, ok := log.before("*messages.ScoreRequest", "*messages.KvEvent")
	if !ok {
		t.Fatal("the shard never took a ScoreRequest turn")
	}
	if n != 0 {
		t.Fatalf("the score request waited behind %d of %d queued events", n, queued)
	}
	// The overtaken events are applied afterwards, in order, none lost.
	if err := r.Barrier(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := overlap(score(last)); got != 4 {
		t.Fatalf("after the backlog drained: overlap %d, want 4", got)
	}
}
