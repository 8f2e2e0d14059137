package actors

import (
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/messages"
)

type strideObserver struct {
	NopObserver
	mismatches atomic.Int32
}

func (o *strideObserver) StrideMismatch() { o.mismatches.Add(1) }

// TestActiveSequenceStride checks router_active_sequence_stride end to end
// through the actors: a routed add carries one hash per stride blocks and
// the prompt's block count, a peer's add with the same stride deduplicates
// against it, and one with another stride is dropped and counted.
func TestActiveSequenceStride(t *testing.T) {
	obs := &strideObserver{}
	pub := make(chan *messages.SequenceEvent, 16)
	r := startRouter(t, func(c *Config) {
		c.ReplicaID = "A"
		c.Sequence.Stride = 4
		c.Observer = obs
		c.Publish = func(ev *messages.SequenceEvent) { pub <- ev }
	})
	register(t, r, 1)
	waitWorkers(t, r, 1)
	ctx := ctxT(t)
	tokens := prompt(22*testBlockSize, 1) // 22 blocks: 5 sampled groups of 4, 2 trailing
	if _, err := r.Route(ctx, &messages.RouteRequest{RequestId: "mine", TokenIds: tokens, UpdateStates: true}); err != nil {
		t.Fatal(err)
	}
	var add *messages.AddRequest
	select {
	case ev := <-pub:
		add = ev.GetAdd()
	case <-time.After(2 * time.Second):
		t.Fatal("add not published")
	}
	if len(add.SequenceHashes) != 5 || add.PromptBlocks != 22 || add.Stride != 4 {
		t.Fatalf("published add: %d hashes, %d blocks, stride %d; want 5, 22, 4", len(add.SequenceHashes), add.PromptBlocks, add.Stride)
	}
	decode := func() float64 {
		l, err := r.PotentialLoads(ctx, tokens, "")
		if err != nil {
			t.Fatal(err)
		}
		return l.Loads[0].PotentialDecodeBlocks
	}
	// Active: 20 blocks in sampled groups + 2 trailing; the same prompt
	// again would add only its 2 trailing blocks.
	if got := decode(); got != 24 {
		t.Fatalf("potential decode blocks %v, want 22 active + 2 new", got)
	}

	peer := proto.Clone(add).(*messages.AddRequest)
	peer.RequestId = "peer-same-stride"
	r.ApplyRemote(&messages.SequenceEvent{Origin: "B", Data: &messages.SequenceEvent_Add{Add: peer}})
	other := proto.Clone(peer).(*messages.AddRequest)
	other.RequestId, other.Stride = "peer-other-stride", 1
	r.ApplyRemote(&messages.SequenceEvent{Origin: "C", Data: &messages.SequenceEvent_Add{Add: other}})
	testutil.Eventually(t, 5*time.Second, "peer add applied, mismatched one dropped", func() bool {
		l, err := r.PotentialLoads(ctx, tokens, "")
		return err == nil && l.Loads[0].ActiveRequests == 2 && obs.mismatches.Load() == 1
	})
	// The peer's prompt shares every sampled group: only its 2 trailing
	// blocks are its own.
	if got := decode(); got != 26 {
		t.Fatalf("potential decode blocks %v, want 24 active + 2 new", got)
	}
}
