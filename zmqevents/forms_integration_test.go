package zmqevents_test

import (
	"context"
	"fmt"
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

// formRig is a mock engine publishing one wire form over real sockets and
// a subscriber feeding an index.
type formRig struct {
	t   *testing.T
	pub *mockengine.ZMQPublisher
	sub *zmqevents.Subscriber
	w   kv.WorkerWithDpRank

	mu     sync.Mutex
	idx    *index.Indexer
	tokens map[uint64][]uint32
	nextID uint64
}

func newFormRig(t *testing.T, wire mockengine.ZMQWire, enc zmqevents.Encoding) *formRig {
	t.Helper()
	r := &formRig{t: t, idx: index.New(), tokens: map[uint64][]uint32{}, w: kv.WorkerWithDpRank{WorkerID: 7}}
	pub, err := mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{
		Endpoint: "tcp://127.0.0.1:0", BlockSize: blockSize, Encoding: enc, Wire: wire,
		Tokens: func(ev *kv.Event) ([]uint32, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.tokens[ev.EventID], nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	sub, err := zmqevents.StartSubscriber(context.Background(), zmqevents.WorkerEndpoint{WorkerID: 7, Endpoint: pub.Endpoint()},
		zmqevents.Options{BlockSize: blockSize, Handler: func(ev *kv.Event) {
			r.mu.Lock()
			_ = r.idx.Apply(ev)
			r.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	r.pub, r.sub = pub, sub
	deadline := time.Now().Add(5 * time.Second)
	for sub.Stats().Messages == 0 {
		if time.Now().After(deadline) {
			t.Fatal("subscriber never received a live message")
		}
		r.send(kv.Event{Worker: r.w, Kind: kv.EventCleared})
		time.Sleep(20 * time.Millisecond)
	}
	return r
}

func (r *formRig) send(ev kv.Event) {
	if err := r.pub.PublishEvent(context.Background(), &ev); err != nil {
		r.t.Fatal(err)
	}
}

// store publishes a prompt's blocks as the engine's Stored event, the
// engine hash of each block being its chained sequence hash.
func (r *formRig) store(prompt []uint32) {
	local := hashing.BlockHashes(prompt, blockSize, hashing.Options{})
	seq := hashing.SequenceHashes(local)
	r.mu.Lock()
	id := r.nextID
	r.nextID++
	r.tokens[id] = prompt
	r.mu.Unlock()
	ev := kv.Event{Worker: r.w, EventID: id, Kind: kv.EventStored}
	for i := range seq {
		ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[i]), TokensHash: local[i]})
	}
	r.send(ev)
}

// matched is the device prefix the index credits the worker for prompt
// hashed as the router would for a request on lora ("" base model).
func (r *formRig) matched(prompt []uint32, lora string) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.idx.FindMatches(hashing.BlockHashes(prompt, blockSize, hashing.Options{LoraName: lora}))[r.w].Device
}

// prompts are n distinct prompts of three blocks.
func prompts(n int) [][]uint32 {
	out := make([][]uint32, n)
	for i := range out {
		p := make([]uint32, 3*blockSize)
		for j := range p {
			p[j] = uint32(1000*(i+1) + j)
		}
		out[i] = p
	}
	return out
}

// waitEvents waits until the subscriber has decoded want raw events.
func (r *formRig) waitEvents(want uint64) {
	r.t.Helper()
	testutil.EventuallyNil(r.t, 10*time.Second, func() error {
		if st := r.sub.Stats(); st.Events < want {
			return fmt.Errorf("decoded %d events, want %d: %+v", st.Events, want, st)
		}
		return nil
	})
}

// Thirty prompts cached on an adapter through vLLM's LoRA block-pool
// shape all match a query for that adapter and none for the base model.
func TestZMQLoRAPromptsMatchTheAdapterOnly(t *testing.T) {
	for _, enc := range []zmqevents.Encoding{zmqevents.EncodingArray, zmqevents.EncodingMap} {
		t.Run(enc.String(), func(t *testing.T) {
			r := newFormRig(t, mockengine.ZMQWire{LoRAName: "sql-lora", LoRAID: 3}, enc)
			ps := prompts(30)
			for _, p := range ps {
				r.store(p)
			}
			testutil.EventuallyNil(t, 10*time.Second, func() error {
				if got := r.matched(ps[len(ps)-1], "sql-lora"); got != 3 {
					return fmt.Errorf("last prompt matched %d blocks: %+v", got, r.sub.Stats())
				}
				return nil
			})
			for i, p := range ps {
				if got := r.matched(p, "sql-lora"); got != 3 {
					t.Errorf("prompt %d: adapter query matched %d of 3 blocks", i, got)
				}
				if got := r.matched(p, ""); got != 0 {
					t.Errorf("prompt %d: base-model query matched %d blocks of the adapter's cache", i, got)
				}
			}
			if st := r.sub.Stats(); st.Malformed != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// lora_id without a name: indexed where neither a base-model query nor
// any adapter query matches, counted under lora_id_without_name.
func TestZMQLoraIDWithoutNameMatchesNothing(t *testing.T) {
	r := newFormRig(t, mockengine.ZMQWire{LoRAIDOnly: true, LoRAID: 3}, zmqevents.EncodingArray)
	ps := prompts(30)
	for _, p := range ps {
		r.store(p)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if n := r.sub.Stats().Reasons[zmqevents.ReasonLoraIDWithoutName]; n != 30 {
			return fmt.Errorf("counted %d lora_id_without_name, want 30", n)
		}
		return nil
	})
	for i, p := range ps {
		if got := r.matched(p, ""); got != 0 {
			t.Errorf("prompt %d: base-model query matched %d blocks of an adapter's cache", i, got)
		}
	}
}

// Each engine form over real sockets: what is indexed, what is counted.
func TestZMQEngineFormsOverSockets(t *testing.T) {
	ps := prompts(10)
	tests := []struct {
		name    string
		wire    mockengine.ZMQWire
		events  uint64 // raw events per store
		indexed bool
		reason  zmqevents.Reason
		counted uint64 // per store, under reason
		errors  bool   // counted as malformed
	}{
		{"unknown event type", mockengine.ZMQWire{UnknownEventType: "BlockMoved"}, 2, true, zmqevents.ReasonUnknownEventType, 1, true},
		{"EAGLE pairs", mockengine.ZMQWire{EAGLEPairs: true}, 1, true, zmqevents.ReasonShortLastPage, 0, false},
		{"SGLang pages with a short last page", mockengine.ZMQWire{SGLangPages: true, ShortPageTokens: 2}, 4, true, zmqevents.ReasonShortLastPage, 1, false},
		{"SGLang EAGLE pages", mockengine.ZMQWire{SGLangPages: true, ShortPageTokens: 3, EAGLEPairs: true}, 4, true, zmqevents.ReasonShortLastPage, 1, false},
		{"block size mismatch", mockengine.ZMQWire{BlockSize: 2 * blockSize}, 1, false, zmqevents.ReasonBlockSizeMismatch, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newFormRig(t, tt.wire, zmqevents.EncodingMap)
			base := r.sub.Stats()
			for _, p := range ps {
				r.store(p)
			}
			r.waitEvents(base.Events + tt.events*uint64(len(ps)))
			st := r.sub.Stats()
			want := uint32(0)
			if tt.indexed {
				want = 3
			}
			// Events are counted as decoded, before the handler applies
			// them: an indexed prompt may show a moment later.
			testutil.EventuallyNil(t, 5*time.Second, func() error {
				for i, p := range ps {
					if got := r.matched(p, ""); got != want {
						return fmt.Errorf("prompt %d matched %d blocks, want %d: %+v", i, got, want, st)
					}
				}
				return nil
			})
			if got := st.Reasons[tt.reason] - base.Reasons[tt.reason]; got != tt.counted*uint64(len(ps)) {
				t.Fatalf("%s counted %d, want %d: %+v", tt.reason, got, tt.counted*uint64(len(ps)), st)
			}
			if (st.Malformed != base.Malformed) != tt.errors {
				t.Fatalf("malformed %d: %+v", st.Malformed, st)
			}
		})
	}
}

// One rank of a dp=2 engine restarts (its sequence goes back to 0): only
// that rank is cleared and caught up; the other's stream goes on.
func TestZMQOneRankRestartClearsOnlyThatRank(t *testing.T) {
	var mu sync.Mutex
	cleared := map[uint32]int{}
	stored := map[uint32]int{}
	tokens := []uint32{1, 2, 3, 4}
	var pub *mockengine.ZMQPublisher
	var err error
	for range 20 { // rank 1 takes the port after a free one, which may be taken
		pub, err = mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{
			Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", testutil.FreePort(t)), BlockSize: blockSize, DPSize: 2,
			Tokens: func(*kv.Event) ([]uint32, error) { return tokens, nil },
		})
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	sub, err := zmqevents.StartSubscriber(context.Background(), zmqevents.WorkerEndpoint{WorkerID: 7, Endpoint: pub.Endpoint(), DPSize: 2},
		zmqevents.Options{BlockSize: blockSize, Handler: func(ev *kv.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch ev.Kind {
			case kv.EventCleared:
				cleared[ev.Worker.DpRank]++
			case kv.EventStored:
				stored[ev.Worker.DpRank]++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	var id uint64
	publish := func(rank uint32) {
		id++
		ev := kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 7, DpRank: rank}, EventID: id, Kind: kv.EventStored,
			Blocks: []kv.StoredBlock{{BlockHash: kv.ExternalBlockHash(id)}}}
		if err := pub.PublishEvent(context.Background(), &ev); err != nil {
			t.Fatal(err)
		}
	}
	// Both ranks heard (past the slow-joiner window).
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		publish(0)
		publish(1)
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if stored[0] == 0 || stored[1] == 0 {
			return fmt.Errorf("stored %v", stored)
		}
		return nil
	})
	for range 5 {
		publish(0)
		publish(1)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if m := sub.Stats().Messages; m < 12 {
			return fmt.Errorf("heard %d batches", m)
		}
		return nil
	})
	if err := pub.RestartRank(1); err != nil {
		t.Fatal(err)
	}
	publish(1) // seq 0 again on rank 1
	publish(0)
	// The restart is counted before the handler gets the clear events:
	// wait for both.
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if st := sub.Stats(); st.Restarts != 1 || cleared[1] < int(kv.NumTiers) {
			return fmt.Errorf("restarts %d, cleared %v", st.Restarts, cleared)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if cleared[1] != int(kv.NumTiers) || cleared[0] != 0 {
		t.Fatalf("cleared %v, want rank 1 on every tier and rank 0 never", cleared)
	}
}
