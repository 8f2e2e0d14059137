package index

import (
	"testing"
	"unsafe"

	"github.com/kvrouter/kvrouter/kv"
)

// The fan fields must not grow the structures every entry pays for.
func TestNodeAndHolderSizes(t *testing.T) {
	if s := unsafe.Sizeof(node{}); s != 56 {
		t.Fatalf("node is %d bytes, want 56 (its single holder inline)", s)
	}
	if s := unsafe.Sizeof(holder{}); s != 16 {
		t.Fatalf("holder is %d bytes, want 16", s)
	}
}

// TestSharedPrefixFan removes workers from below a block every worker
// holds, in every way a worker can go, and checks that the others keep
// their chains and the fan is built and dropped with the block's width.
func TestSharedPrefixFan(t *testing.T) {
	const workers, chains, chainBlocks = 40, 8, 4
	const perWorker = 1 + chains*chainBlocks
	tr := NewTree()
	evs := sharedPrefixEvents(workers, chains, chainBlocks)
	for i := range evs {
		mustApply(t, tr, &evs[i])
	}
	shared := tr.node(tr.root.child)
	if shared == nil || shared.fan == 0 || len(tr.fans.at(shared.fan)) != workers {
		t.Fatalf("the shared block has no fan over %d ranks", workers)
	}
	chainHead := func(w int) []kv.LocalBlockHash {
		ext := uint64(w+1) << 32
		return []kv.LocalBlockHash{sharedLocal, kv.LocalBlockHash(mix64(ext)), kv.LocalBlockHash(mix64(ext + 1))}
	}
	mustApply(t, tr, &kv.Event{Worker: rank(3, 0), Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{sharedExt}})
	mustApply(t, tr, cleared(rank(5, 0)))
	tr.RemoveWorker(7)
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	c := tr.Counters()
	if c.CascadeRemoved != perWorker-1 || c.ClearedBlocks != perWorker || c.RemovedByWorker != perWorker {
		t.Fatalf("counters %+v", c)
	}
	if tr.Len() != (workers-3)*perWorker {
		t.Fatalf("len %d", tr.Len())
	}
	for _, w := range []int{3, 5, 7} {
		if got := scoresOf(tr, 1); got[rank(kv.WorkerID(w), 0)] != 0 {
			t.Fatalf("worker %d still holds the shared block", w)
		}
	}
	if got := tr.FindMatches(chainHead(4), false).Scores; len(got) != workers-3 || got[rank(4, 0)] != 3 {
		t.Fatalf("worker 4's chain: %v", got)
	}
	// Narrow the shared block down to its last worker's chains: the fan
	// goes once the block has no more than fanDrop children.
	for w := range workers - 1 {
		tr.RemoveWorker(kv.WorkerID(w))
		if err := tr.CheckInvariants(); err != nil {
			t.Fatalf("after removing worker %d: %v", w, err)
		}
	}
	if tr.childCount(shared) != chains || shared.fan == 0 {
		t.Fatalf("%d children, fan %v: the fan must outlive a moderate shrink", tr.childCount(shared), shared.fan != 0)
	}
	if tr.Len() != perWorker {
		t.Fatalf("len %d", tr.Len())
	}
	last := rank(workers-1, 0)
	for c := range chains - defaultFanDrop {
		mustApply(t, tr, removed(last, uint64(workers)<<32|uint64(c)<<16))
	}
	if tr.childCount(shared) != defaultFanDrop || shared.fan != 0 {
		t.Fatalf("%d children, fan %v: want it dropped", tr.childCount(shared), shared.fan != 0)
	}
}
