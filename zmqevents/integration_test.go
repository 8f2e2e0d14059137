package zmqevents_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/zmqevents"
)

const blockSize = 4

// engineModel produces the events an engine with prefix caching would:
// chains of stored blocks keyed like the mock engine (engine hash = the
// chained sequence hash) and evictions, remembering each Stored event's
// tokens for the publisher.
type engineModel struct {
	worker kv.WorkerWithDpRank
	rng    *rand.Rand
	nextID uint64
	cached map[kv.ExternalBlockHash]bool
	order  []kv.ExternalBlockHash

	mu     sync.Mutex
	tokens map[uint64][]uint32 // by event id
}

func newEngineModel(w kv.WorkerWithDpRank, seed uint64) *engineModel {
	return &engineModel{worker: w, rng: rand.New(rand.NewPCG(seed, 1)),
		cached: map[kv.ExternalBlockHash]bool{}, tokens: map[uint64][]uint32{}}
}

func (m *engineModel) tokensOf(ev *kv.Event) ([]uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tokens[ev.EventID], nil
}

// next returns the next event: mostly stores of prompts drawn from a few
// shared prefixes, sometimes an eviction of the oldest cached blocks.
func (m *engineModel) next() kv.Event {
	ev := kv.Event{Worker: m.worker, EventID: m.nextID, Tier: kv.TierDevice}
	m.nextID++
	if len(m.order) > 64 && m.rng.IntN(4) == 0 {
		// The most recently stored blocks are leaves (a child is always
		// stored after its parent), so evicting from the tail never
		// orphans a cached block.
		for range 1 + m.rng.IntN(4) {
			h := m.order[len(m.order)-1]
			m.order = m.order[:len(m.order)-1]
			delete(m.cached, h)
			ev.Removed = append(ev.Removed, h)
		}
		ev.Kind = kv.EventRemoved
		return ev
	}
	prompt := make([]uint32, blockSize*(2+m.rng.IntN(6)))
	prefix := uint32(m.rng.IntN(5))
	for i := range prompt {
		if i < 2*blockSize {
			prompt[i] = prefix*1000 + uint32(i)
		} else {
			prompt[i] = m.rng.Uint32N(30000)
		}
	}
	local := hashing.BlockHashes(prompt, blockSize, hashing.Options{})
	seq := hashing.SequenceHashes(local)
	first := 0
	for first < len(seq) && m.cached[kv.ExternalBlockHash(seq[first])] {
		first++
	}
	if first == len(seq) { // all cached: nothing new to store
		return m.next()
	}
	ev.Kind = kv.EventStored
	if first > 0 {
		ev.HasParent, ev.ParentHash = true, kv.ExternalBlockHash(seq[first-1])
	}
	for i := first; i < len(seq); i++ {
		h := kv.ExternalBlockHash(seq[i])
		ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: h, TokensHash: local[i]})
		m.cached[h] = true
		m.order = append(m.order, h)
	}
	m.mu.Lock()
	m.tokens[ev.EventID] = prompt[first*blockSize:]
	m.mu.Unlock()
	return ev
}

// rig is a publisher, a subscriber feeding an index, and a reference
// index fed the engine's events directly.
type rig struct {
	t      testing.TB
	engine *engineModel
	pub    *mockengine.ZMQPublisher
	sub    *zmqevents.Subscriber
	ref    *index.Indexer

	mu  sync.Mutex
	got *index.Indexer

	sent uint64 // batches the current publisher numbered

	trust *trustRecorder // what index trust heard
}

func newRig(t testing.TB, enc zmqevents.Encoding, drop func(rank uint32, seq uint64) bool) *rig {
	t.Helper()
	r := &rig{t: t, engine: newEngineModel(kv.WorkerWithDpRank{WorkerID: 7}, 1), ref: index.New(), got: index.New(),
		trust: &trustRecorder{}}
	pub, err := mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{
		Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", BlockSize: blockSize,
		Encoding: enc, DropSeq: drop,
		// The engine model is replaced on restarts; publishing happens on
		// the test goroutine, so reading r.engine here is safe.
		Tokens: func(ev *kv.Event) ([]uint32, error) { return r.engine.tokensOf(ev) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	r.pub = pub
	sub, err := zmqevents.StartSubscriber(context.Background(), zmqevents.WorkerEndpoint{
		WorkerID: 7, Endpoint: pub.Endpoint(), ReplayEndpoint: pub.ReplayEndpoint(),
	}, zmqevents.Options{BlockSize: blockSize, ReplayTimeout: 2 * time.Second, Trust: r.trust, Handler: func(ev *kv.Event) {
		r.mu.Lock()
		_ = r.got.Apply(ev) // rejections are counted by the index
		r.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	r.sub = sub
	r.waitSubscribed()
	return r
}

// waitSubscribed publishes Cleared (a no-op on empty indexes) until the
// subscriber receives one live, so no later message is lost to the PUB
// socket's slow-joiner window.
func (r *rig) waitSubscribed() {
	deadline := time.Now().Add(5 * time.Second)
	for r.sub.Stats().Messages == 0 {
		if time.Now().After(deadline) {
			r.t.Fatal("subscriber never received a live message")
		}
		r.publish(kv.Event{Worker: r.engine.worker, Kind: kv.EventCleared})
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *rig) publish(ev kv.Event) {
	if err := r.pub.PublishEvent(context.Background(), &ev); err != nil {
		r.t.Fatal(err)
	}
	r.sent++
	if err := r.ref.Apply(&ev); err != nil {
		r.t.Fatalf("reference index refused event %d: %v", ev.EventID, err)
	}
}

func (r *rig) workload(n int) {
	for range n {
		r.publish(r.engine.next())
	}
}

// waitConverged waits until the subscriber's index equals the reference.
func (r *rig) waitConverged() {
	r.t.Helper()
	want := r.ref.Digest()
	testutil.EventuallyNil(r.t, 10*time.Second, func() error {
		r.mu.Lock() // the subscriber's goroutines apply to r.got
		got := r.got.Digest()
		if got == want {
			r.mu.Unlock()
			return nil
		}
		size, counters := r.got.Len(), r.got.CounterMap()
		r.mu.Unlock()
		return fmt.Errorf("index digest %x (%d blocks) never reached the reference %x (%d blocks); stats %+v counters %v",
			got, size, want, r.ref.Len(), r.sub.Stats(), counters)
	})
}

func TestZMQEndToEndMatchesDirectIndex(t *testing.T) {
	for _, enc := range []zmqevents.Encoding{zmqevents.EncodingArray, zmqevents.EncodingMap} {
		t.Run(enc.String(), func(t *testing.T) {
			r := newRig(t, enc, nil)
			r.workload(500)
			r.waitConverged()
			if r.ref.Len() == 0 {
				t.Fatal("workload stored nothing")
			}
			if st := r.sub.Stats(); st.Malformed != 0 || st.Restarts != 0 || st.Lost != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestZMQReplayFillsDroppedMessages(t *testing.T) {
	r := newRig(t, zmqevents.EncodingArray, func(_ uint32, seq uint64) bool { return seq > 20 && seq%7 == 3 })
	r.workload(400)
	r.publish(kv.Event{Worker: r.engine.worker, Kind: kv.EventRemoved}) // a last message reveals a trailing gap
	r.waitConverged()
	st := r.sub.Stats()
	if st.Replays == 0 || st.Replayed < 50 || st.Lost != 0 {
		t.Fatalf("want the gaps filled by replays: %+v", st)
	}
}

func TestZMQRestartClearsAndRebuilds(t *testing.T) {
	r := newRig(t, zmqevents.EncodingMap, nil)
	r.workload(200)
	r.waitConverged()

	r.pub.Restart()
	// A restarted engine starts with an empty cache and fresh event ids.
	for tier := range kv.NumTiers {
		if err := r.ref.Apply(&kv.Event{Worker: r.engine.worker, Kind: kv.EventCleared, Tier: tier}); err != nil {
			t.Fatal(err)
		}
	}
	r.engine = newEngineModel(r.engine.worker, 2)
	r.pub.Close()
	r.workloadAfterRestart(t)
}

// TestZMQRestartContinuingTheOldSequence is the restart the sequence
// cannot show: the new engine process has published exactly as many
// batches as the old one when the SUB socket reconnects, so the first
// batch heard continues the old numbering. Only verifying the batch
// before it (replayed from the new process) tells the restart apart.
func TestZMQRestartContinuingTheOldSequence(t *testing.T) {
	r := newRig(t, zmqevents.EncodingMap, nil)
	r.workload(200)
	r.waitConverged()
	old := r.sent
	for tier := range kv.NumTiers {
		if err := r.ref.Apply(&kv.Event{Worker: r.engine.worker, Kind: kv.EventCleared, Tier: tier}); err != nil {
			t.Fatal(err)
		}
	}
	r.engine = newEngineModel(r.engine.worker, 2)
	r.pub.Close()
	// The new process's first `old` batches go unheard (the socket is
	// still reconnecting) but stay in its replay buffer.
	r.rebind(t, func(_ uint32, seq uint64) bool { return seq < old })
	r.workload(int(old))
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if c := r.sub.Stats().Connections; c < 2 {
			return fmt.Errorf("subscriber has %d connections, want a reconnect", c)
		}
		return nil
	})
	// The handshake is counted before the SUB socket's subscription
	// reaches the new publisher, and a PUB drops what it sends before
	// that: wait for the subscription, so the batch numbered `old` is the
	// first heard from the new process.
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if !r.pub.Subscribed(r.engine.worker.DpRank) {
			return errors.New("the subscription never reached the new publisher")
		}
		return nil
	})
	before := r.sub.Stats()
	r.publish(r.engine.next()) // numbered `old`: the next the subscriber expects
	r.waitConverged()
	// The stats are read after the replay returns, which can be a moment
	// after its last batch converged the index.
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if st := r.sub.Stats(); st.Restarts != 1 || st.Replays != before.Replays+2 || st.Lost != 0 {
			return fmt.Errorf("want the restart found by a verifying replay and the new process replayed from 0 (replays before %d): %+v", before.Replays, st)
		}
		return nil
	})
}

// workloadAfterRestart rebinds a publisher on the same addresses (a new
// engine process) and checks the index rebuilds from its stream.
func (r *rig) workloadAfterRestart(t *testing.T) {
	r.rebind(t, nil)
	r.workload(200)
	deadline := time.Now().Add(10 * time.Second)
	for r.sub.Stats().Restarts == 0 && time.Now().Before(deadline) {
		r.publish(r.engine.next()) // the SUB reconnects to the new process; keep talking until it hears
		time.Sleep(5 * time.Millisecond)
	}
	r.waitConverged()
	if st := r.sub.Stats(); st.Restarts != 1 {
		t.Fatalf("want one restart: %+v", st)
	}
}

// rebind starts a publisher on the old one's addresses: a new engine
// process, numbering from 0.
func (r *rig) rebind(t *testing.T, drop func(rank uint32, seq uint64) bool) {
	ep, rep := r.pub.Endpoint(), r.pub.ReplayEndpoint()
	var pub *mockengine.ZMQPublisher
	var err error
	for range 50 { // the old sockets may take a moment to release the ports
		pub, err = mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{
			Endpoint: ep, ReplayEndpoint: rep, BlockSize: blockSize, Encoding: zmqevents.EncodingMap,
			Tokens: r.engine.tokensOf, DropSeq: drop,
		})
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	r.pub, r.sent = pub, 0
}

func BenchmarkZMQIngest(b *testing.B) {
	const perLoop = 2000
	var blocks uint64
	done := make(chan struct{}, 1)
	var target uint64
	engine := newEngineModel(kv.WorkerWithDpRank{WorkerID: 7}, 3)
	pub, err := mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{
		Endpoint: "tcp://127.0.0.1:0", BlockSize: blockSize, Tokens: engine.tokensOf, Encoding: zmqevents.EncodingMap,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	idx := index.New()
	var mu sync.Mutex
	sub, err := zmqevents.StartSubscriber(context.Background(), zmqevents.WorkerEndpoint{WorkerID: 7, Endpoint: pub.Endpoint()},
		zmqevents.Options{BlockSize: blockSize, Handler: func(ev *kv.Event) {
			mu.Lock()
			_ = idx.Apply(ev)
			blocks += uint64(len(ev.Blocks))
			if target != 0 && blocks >= target {
				target = 0
				done <- struct{}{}
			}
			mu.Unlock()
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	for sub.Stats().Messages == 0 {
		ev := kv.Event{Worker: engine.worker, Kind: kv.EventCleared}
		_ = pub.PublishEvent(context.Background(), &ev)
		time.Sleep(10 * time.Millisecond)
	}
	evs := make([]kv.Event, perLoop)
	var total uint64
	start := time.Now()
	for b.Loop() {
		var want uint64
		for i := range evs {
			evs[i] = engine.next()
			want += uint64(len(evs[i].Blocks))
		}
		mu.Lock()
		target = blocks + want
		mu.Unlock()
		for i := range evs {
			if err := pub.PublishEvent(context.Background(), &evs[i]); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.Fatalf("ingest stalled: %+v", sub.Stats())
		}
		total += want
	}
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "blocks/s")
	b.ReportMetric(float64(perLoop*b.N)/time.Since(start).Seconds(), "events/s")
}

// With the SUB socket connected throughout, the restart shows as the
// sequence going back to 0.
func TestZMQSequenceGoingBackClears(t *testing.T) {
	r := newRig(t, zmqevents.EncodingArray, nil)
	r.workload(150)
	r.waitConverged()
	r.pub.Restart()
	for tier := range kv.NumTiers {
		if err := r.ref.Apply(&kv.Event{Worker: r.engine.worker, Kind: kv.EventCleared, Tier: tier}); err != nil {
			t.Fatal(err)
		}
	}
	r.engine = newEngineModel(r.engine.worker, 5)
	r.workload(150)
	r.waitConverged()
	if st := r.sub.Stats(); st.Restarts != 1 || st.Lost != 0 {
		t.Fatalf("want one restart: %+v", st)
	}
}
