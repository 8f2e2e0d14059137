package index

import (
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func rank(w kv.WorkerID, dp uint32) kv.WorkerWithDpRank {
	return kv.WorkerWithDpRank{WorkerID: w, DpRank: dp}
}

// blk builds a stored block whose engine hash is given explicitly.
func blk(ext uint64, local uint64) kv.StoredBlock {
	return kv.StoredBlock{BlockHash: kv.ExternalBlockHash(ext), TokensHash: kv.LocalBlockHash(local)}
}

func storedRoot(r kv.WorkerWithDpRank, blocks ...kv.StoredBlock) *kv.Event {
	return &kv.Event{Worker: r, Kind: kv.EventStored, Blocks: blocks}
}

func storedUnder(r kv.WorkerWithDpRank, parent uint64, blocks ...kv.StoredBlock) *kv.Event {
	return &kv.Event{Worker: r, Kind: kv.EventStored, HasParent: true,
		ParentHash: kv.ExternalBlockHash(parent), Blocks: blocks}
}

func removed(r kv.WorkerWithDpRank, hashes ...uint64) *kv.Event {
	ev := &kv.Event{Worker: r, Kind: kv.EventRemoved}
	for _, h := range hashes {
		ev.Removed = append(ev.Removed, kv.ExternalBlockHash(h))
	}
	return ev
}

// cleared is the Cleared event of one rank: it empties that rank only.
func cleared(r kv.WorkerWithDpRank) *kv.Event {
	return &kv.Event{Worker: r, Kind: kv.EventCleared}
}

func locals(hs ...uint64) []kv.LocalBlockHash {
	out := make([]kv.LocalBlockHash, len(hs))
	for i, h := range hs {
		out[i] = kv.LocalBlockHash(h)
	}
	return out
}

// chain stores local hashes 1..n style chains: ext = 1000*tag + local so
// tests can name engine hashes predictably.
// longChain is the local hashes 1..n, for chains past checkSelfReference's
// pairwise limit.
func longChain(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

func chain(tag uint64, local ...uint64) []kv.StoredBlock {
	out := make([]kv.StoredBlock, len(local))
	for i, l := range local {
		out[i] = blk(tag*1000+l, l)
	}
	return out
}

// fanSettings are the fan thresholds the randomized tests run with: the
// default, and thresholds low enough for their small trees to build, use
// and drop fans all the time.
var fanSettings = []struct {
	name        string
	build, drop int
}{
	{"fan=default", defaultFanBuild, defaultFanDrop},
	{"fan=2/1", 2, 1},
	{"fan=2/0", 2, 0}, // a fan kept down to a single, inline child
}

// newFanTree returns an empty tree with the given fan thresholds.
func newFanTree(build, drop int) *Tree {
	tr := NewTree()
	tr.fanBuild, tr.fanDrop = build, drop
	return tr
}

func mustApply(t testing.TB, tr *Tree, evs ...*kv.Event) {
	t.Helper()
	for _, ev := range evs {
		if err := tr.Apply(ev); err != nil {
			t.Fatalf("apply %v: %v", ev.Kind, err)
		}
	}
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func scoresOf(tr *Tree, hs ...uint64) map[kv.WorkerWithDpRank]uint32 {
	return tr.FindMatches(locals(hs...), false).Scores
}
