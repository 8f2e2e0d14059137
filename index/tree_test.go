package index

import (
	"errors"
	"maps"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

var (
	w1 = rank(1, 0)
	w2 = rank(2, 0)
	w3 = rank(3, 0)
	// w1r1 is a second data-parallel rank of worker 1.
	w1r1 = rank(1, 1)
)

func TestTreeApply(t *testing.T) {
	type scores = map[kv.WorkerWithDpRank]uint32
	tests := []struct {
		name    string
		setup   []*kv.Event
		ev      *kv.Event
		wantErr error
		query   []uint64
		want    scores
		wantLen int
		counter func(Counters) (got, want uint64)
	}{
		{
			name:    "stored chain from root",
			ev:      storedRoot(w1, chain(1, 1, 2, 3)...),
			query:   []uint64{1, 2, 3, 4},
			want:    scores{w1: 3},
			wantLen: 3,
			counter: func(c Counters) (uint64, uint64) { return c.StoredBlocks, 3 },
		},
		{
			name:    "stored under a parent extends the chain",
			setup:   []*kv.Event{storedRoot(w1, chain(1, 1, 2)...)},
			ev:      storedUnder(w1, 1002, chain(1, 3)...),
			query:   []uint64{1, 2, 3},
			want:    scores{w1: 3},
			wantLen: 3,
		},
		{
			name:    "unknown parent skips the whole event",
			setup:   []*kv.Event{storedRoot(w1, chain(1, 1)...)},
			ev:      storedUnder(w1, 999, chain(1, 2, 3)...),
			wantErr: ErrParentNotFound,
			query:   []uint64{1, 2, 3},
			want:    scores{w1: 1},
			wantLen: 1,
			counter: func(c Counters) (uint64, uint64) { return c.ParentNotFound, 1 },
		},
		{
			name:    "parent held by another rank only is not found",
			setup:   []*kv.Event{storedRoot(w2, chain(1, 1)...)},
			ev:      storedUnder(w1, 1001, chain(1, 2)...),
			wantErr: ErrParentNotFound,
			query:   []uint64{1, 2},
			want:    scores{w2: 1},
			wantLen: 1,
		},
		{
			name:    "duplicate store is a counted no-op",
			setup:   []*kv.Event{storedRoot(w1, chain(1, 1, 2)...)},
			ev:      storedRoot(w1, chain(1, 1, 2)...),
			query:   []uint64{1, 2},
			want:    scores{w1: 2},
			wantLen: 2,
			counter: func(c Counters) (uint64, uint64) { return c.DuplicateStore, 2 },
		},
		{
			name:    "removed leaf",
			setup:   []*kv.Event{storedRoot(w1, chain(1, 1, 2, 3)...)},
			ev:      removed(w1, 1003),
			query:   []uint64{1, 2, 3},
			want:    scores{w1: 2},
			wantLen: 2,
			counter: func(c Counters) (uint64, uint64) { return c.RemovedBlocks, 1 },
		},
		{
			name:    "removed unknown hash still applies the rest",
			setup:   []*kv.Event{storedRoot(w1, chain(1, 1, 2, 3)...)},
			ev:      removed(w1, 42, 1003, 43),
			wantErr: ErrBlockNotFound,
			query:   []uint64{1, 2, 3},
			want:    scores{w1: 2},
			wantLen: 2,
			counter: func(c Counters) (uint64, uint64) { return c.RemoveUnknown, 2 },
		},
		{
			name:    "removed from an unknown rank",
			ev:      removed(w3, 1),
			wantErr: ErrBlockNotFound,
			want:    scores{},
			counter: func(c Counters) (uint64, uint64) { return c.RemoveUnknown, 1 },
		},
		{
			name: "removing a middle block drops the rank's descendants only",
			setup: []*kv.Event{
				storedRoot(w1, chain(1, 1, 2, 3)...),
				storedRoot(w2, chain(2, 1, 2, 3)...),
			},
			ev:      removed(w1, 1002),
			query:   []uint64{1, 2, 3},
			want:    scores{w1: 1, w2: 3},
			wantLen: 4,
			counter: func(c Counters) (uint64, uint64) { return c.CascadeRemoved, 1 },
		},
		{
			name:    "batch listing a parent before its child reports no unknown",
			setup:   []*kv.Event{storedRoot(w1, chain(1, 1, 2, 3)...)},
			ev:      removed(w1, 1002, 1003),
			query:   []uint64{1, 2, 3},
			want:    scores{w1: 1},
			wantLen: 1,
			counter: func(c Counters) (uint64, uint64) { return c.RemoveUnknown, 0 },
		},
		{
			name: "cleared empties only the dp rank that sent it",
			setup: []*kv.Event{
				storedRoot(w1, chain(1, 1, 2)...),
				storedRoot(w1r1, chain(1, 1, 2)...),
				storedRoot(w2, chain(2, 1)...),
			},
			ev:      cleared(w1),
			query:   []uint64{1, 2},
			want:    scores{w1r1: 2, w2: 1},
			wantLen: 3,
			counter: func(c Counters) (uint64, uint64) { return c.ClearedBlocks, 2 },
		},
		{
			name:    "same content under a new engine hash re-keys the block",
			setup:   []*kv.Event{storedRoot(w1, chain(1, 1, 2)...)},
			ev:      storedUnder(w1, 1001, blk(7777, 2)),
			query:   []uint64{1, 2},
			want:    scores{w1: 2},
			wantLen: 2,
			counter: func(c Counters) (uint64, uint64) { return c.Rekeyed, 1 },
		},
		{
			name: "engine hash reused for other content moves it",
			setup: []*kv.Event{
				storedRoot(w1, chain(1, 1, 2, 3)...),
			},
			// 1002 named block 2 under 1; now it names block 9 at the root.
			ev:      storedRoot(w1, blk(1002, 9)),
			query:   []uint64{1, 2, 3},
			want:    scores{w1: 1},
			wantLen: 2,
			counter: func(c Counters) (uint64, uint64) { return c.Moved, 1 },
		},
		{
			name:    "block naming its own parent is rejected whole",
			setup:   []*kv.Event{storedRoot(w1, chain(1, 1)...)},
			ev:      storedUnder(w1, 1001, blk(5, 2), blk(1001, 3)),
			wantErr: ErrInvalidBlockSequence,
			query:   []uint64{1, 2, 3},
			want:    scores{w1: 1},
			wantLen: 1,
			counter: func(c Counters) (uint64, uint64) { return c.InvalidSequence, 1 },
		},
		{
			name:    "engine hash repeated inside one chain is rejected whole",
			ev:      storedRoot(w1, blk(5, 1), blk(6, 2), blk(5, 3)),
			wantErr: ErrInvalidBlockSequence,
			query:   []uint64{1, 2, 3},
			want:    scores{},
			wantLen: 0,
		},
		{
			// Past 32 blocks the repeat is found by the name filter and
			// the exact check behind it (namefilter.go).
			name:    "engine hash repeated inside a long chain is rejected whole",
			ev:      storedRoot(w1, append(chain(1, longChain(40)...), blk(1007, 41))...),
			wantErr: ErrInvalidBlockSequence,
			query:   []uint64{1, 2, 3},
			want:    scores{},
			wantLen: 0,
			counter: func(c Counters) (uint64, uint64) { return c.InvalidSequence, 1 },
		},
		{
			name:    "a long chain of distinct names is stored",
			ev:      storedRoot(w1, chain(1, longChain(40)...)...),
			query:   []uint64{1, 2, 3},
			want:    scores{w1: 3},
			wantLen: 40,
		},
		{
			name:    "chain naming an ancestor stops there",
			setup:   []*kv.Event{storedRoot(w1, chain(1, 1, 2)...)},
			ev:      storedUnder(w1, 1002, blk(50, 3), blk(1001, 4)),
			wantErr: ErrInvalidBlockSequence,
			query:   []uint64{1, 2, 3, 4},
			want:    scores{w1: 3},
			wantLen: 3,
		},
		{
			name:    "stored without blocks is invalid",
			ev:      storedRoot(w1),
			wantErr: ErrInvalidEvent,
			want:    scores{},
			counter: func(c Counters) (uint64, uint64) { return c.InvalidEvent, 1 },
		},
		{
			name:    "unknown kind is invalid",
			ev:      &kv.Event{Worker: w1, Kind: 77},
			wantErr: ErrInvalidEvent,
			want:    scores{},
		},
		{
			name:    "nil event is invalid",
			ev:      nil,
			wantErr: ErrInvalidEvent,
			want:    scores{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTree()
			mustApply(t, tr, tt.setup...)
			err := tr.Apply(tt.ev)
			if tt.wantErr == nil && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if err := tr.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			got := scoresOf(tr, tt.query...)
			if !maps.Equal(got, tt.want) {
				t.Errorf("scores %v, want %v", got, tt.want)
			}
			if tr.Len() != tt.wantLen {
				t.Errorf("len %d, want %d", tr.Len(), tt.wantLen)
			}
			if tt.counter != nil {
				if got, want := tt.counter(tr.Counters()); got != want {
					t.Errorf("counter %d, want %d (%+v)", got, want, tr.Counters())
				}
			}
		})
	}
}

func TestRekeyForgetsOldHash(t *testing.T) {
	tr := NewTree()
	mustApply(t, tr, storedRoot(w1, chain(1, 1, 2)...), storedUnder(w1, 1001, blk(7777, 2)))
	if err := tr.Apply(removed(w1, 1002)); !errors.Is(err, ErrBlockNotFound) {
		t.Fatalf("removing the forgotten hash: %v", err)
	}
	mustApply(t, tr, storedUnder(w1, 7777, blk(8888, 3)), removed(w1, 7777))
	if got := scoresOf(tr, 1, 2, 3); !maps.Equal(got, map[kv.WorkerWithDpRank]uint32{w1: 1}) {
		t.Fatalf("scores %v", got)
	}
}

func TestEmptyNodesAreUnlinked(t *testing.T) {
	tr := NewTree()
	mustApply(t, tr,
		storedRoot(w1, chain(1, 1, 2, 3)...),
		storedRoot(w2, chain(2, 1, 2)...),
	)
	if tr.Nodes() != 3 || tr.Len() != 5 {
		t.Fatalf("nodes %d len %d", tr.Nodes(), tr.Len())
	}
	mustApply(t, tr, removed(w1, 1001))
	if tr.Nodes() != 2 || tr.Len() != 2 {
		t.Fatalf("after w1 drops its root block: nodes %d len %d", tr.Nodes(), tr.Len())
	}
	mustApply(t, tr, removed(w2, 2002, 2001))
	if tr.Nodes() != 0 || tr.Len() != 0 {
		t.Fatalf("after everything is removed: nodes %d len %d", tr.Nodes(), tr.Len())
	}
}

func TestClearedKeepsRanksAndRemoveWorkerForgetsThem(t *testing.T) {
	tr := NewTree()
	mustApply(t, tr,
		storedRoot(w1, chain(1, 1)...),
		storedRoot(w1r1, chain(1, 1, 2)...),
		storedRoot(w2, chain(2, 1)...),
		cleared(w1),
		cleared(w1r1),
	)
	want := map[kv.WorkerWithDpRank]uint64{w1: 0, w1r1: 0, w2: 1}
	if got := tr.WorkerBlockCounts(); !maps.Equal(got, want) {
		t.Fatalf("after clear: %v, want %v", got, want)
	}
	tr.RemoveWorker(1)
	tr.RemoveWorker(99)
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	want = map[kv.WorkerWithDpRank]uint64{w2: 1}
	if got := tr.WorkerBlockCounts(); !maps.Equal(got, want) {
		t.Fatalf("after remove: %v, want %v", got, want)
	}
	c := tr.Counters()
	if c.WorkersRemoved != 1 || c.UnknownWorkerRemoved != 1 || c.Cleared != 2 || c.ClearedBlocks != 3 {
		t.Fatalf("counters %+v", c)
	}
	// The freed id is reused without confusing the new rank with the old.
	mustApply(t, tr, storedRoot(w3, chain(3, 1, 2)...))
	if got := scoresOf(tr, 1, 2); !maps.Equal(got, map[kv.WorkerWithDpRank]uint32{w2: 1, w3: 2}) {
		t.Fatalf("scores %v", got)
	}
}

func TestFindMatchesDropOuts(t *testing.T) {
	tr := NewTree()
	mustApply(t, tr,
		storedRoot(w1, chain(1, 1, 2, 3, 4, 5)...),
		storedRoot(w2, chain(2, 1, 2, 3)...),
		storedRoot(w3, chain(3, 1, 2, 9)...),
		storedRoot(w1r1, chain(4, 7)...),
	)
	tests := []struct {
		name  string
		query []uint64
		want  map[kv.WorkerWithDpRank]uint32
	}{
		{"full", []uint64{1, 2, 3, 4, 5, 6}, map[kv.WorkerWithDpRank]uint32{w1: 5, w2: 3, w3: 2}},
		{"branch", []uint64{1, 2, 9}, map[kv.WorkerWithDpRank]uint32{w1: 2, w2: 2, w3: 3}},
		{"other root", []uint64{7, 1}, map[kv.WorkerWithDpRank]uint32{w1r1: 1}},
		{"miss", []uint64{8, 1, 2}, map[kv.WorkerWithDpRank]uint32{}},
		{"empty", nil, map[kv.WorkerWithDpRank]uint32{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, early := range []bool{false, true} {
				got := tr.FindMatches(locals(tt.query...), early)
				if !maps.Equal(got.Scores, tt.want) {
					t.Errorf("earlyExit=%v: %v, want %v", early, got.Scores, tt.want)
				}
				for r := range got.Scores {
					if got.TreeSizes[r] != tr.WorkerBlockCounts()[r] {
						t.Errorf("tree size of %s: %d", r, got.TreeSizes[r])
					}
				}
				if len(got.TreeSizes) != len(got.Scores) {
					t.Errorf("tree sizes for %d ranks, scores for %d", len(got.TreeSizes), len(got.Scores))
				}
			}
		})
	}
}

func TestDigestAndDump(t *testing.T) {
	a := NewTree()
	mustApply(t, a,
		storedRoot(w1, chain(1, 1, 2, 3)...),
		storedRoot(w2, chain(2, 1, 2)...),
		storedUnder(w2, 2002, chain(2, 8, 9)...),
		storedRoot(w1r1, chain(4, 5)...),
	)
	// Same content, other order, other engine hashes.
	b := NewTree()
	mustApply(t, b,
		storedRoot(w1r1, chain(40, 5)...),
		storedRoot(w2, chain(20, 1, 2, 8, 9)...),
		storedRoot(w1, chain(10, 1, 2)...),
		storedUnder(w1, 10002, chain(10, 3)...),
	)
	if a.Digest() != b.Digest() {
		t.Fatal("same content, different digests")
	}
	mustApply(t, b, removed(w2, 20009))
	if a.Digest() == b.Digest() {
		t.Fatal("different content, same digest")
	}
	if NewTree().Digest() != 0 {
		t.Fatal("empty tree digest is not zero")
	}

	dump := a.Dump()
	if len(dump) != a.Len() {
		t.Fatalf("dump has %d events for %d entries", len(dump), a.Len())
	}
	seen := map[kv.WorkerWithDpRank]map[kv.ExternalBlockHash]bool{}
	for i, ev := range dump {
		if ev.EventID != uint64(i) || len(ev.Blocks) != 1 || ev.Kind != kv.EventStored {
			t.Fatalf("event %d malformed: %+v", i, ev)
		}
		if seen[ev.Worker] == nil {
			seen[ev.Worker] = map[kv.ExternalBlockHash]bool{}
		}
		if ev.HasParent && !seen[ev.Worker][ev.ParentHash] {
			t.Fatalf("event %d comes before its parent", i)
		}
		seen[ev.Worker][ev.Blocks[0].BlockHash] = true
	}
	c := NewTree()
	for i := range dump {
		mustApply(t, c, &dump[i])
	}
	if c.Digest() != a.Digest() || !maps.Equal(c.WorkerBlockCounts(), a.WorkerBlockCounts()) {
		t.Fatal("rebuilt tree differs")
	}
	// The rebuild keeps engine hashes: removing by the original name works.
	mustApply(t, c, removed(w2, 2009))
}

func TestErrorReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{ErrInvalidEvent, "invalid_event"},
		{ErrParentNotFound, "parent_not_found"},
		{ErrBlockNotFound, "block_not_found"},
		{ErrInvalidBlockSequence, "invalid_block_sequence"},
		{errors.New("other"), "error"},
	}
	for _, tt := range tests {
		if got := ErrorReason(tt.err); got != tt.want {
			t.Errorf("ErrorReason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
	tr := NewTree()
	err := tr.Apply(storedUnder(w1, 5, chain(1, 1)...))
	if got := ErrorReason(err); got != "parent_not_found" {
		t.Errorf("wrapped error reason %q", got)
	}
}

// A node's first holder lives inline; a second moves the set to a pooled
// array, which moves up the size classes as it grows and down as it
// empties, and removing down to one moves it back, with every holder (and
// its fan position) intact throughout and every array returned.
func TestHolderInlineAndBack(t *testing.T) {
	tr := NewTree()
	n := tr.arena.alloc()
	inline := func() bool { hs := tr.holders(n); return len(hs) == 1 && &hs[0] == &n.one[0] }
	tr.insertHolder(n, 0, holder{ext: 10, id: 5, pos: 7})
	if !inline() {
		t.Fatal("the first holder is not inline")
	}
	at, _ := tr.find(n, 2)
	tr.insertHolder(n, at, holder{ext: 20, id: 2, pos: 3})
	if hs := tr.holders(n); len(hs) != 2 || &hs[0] == &n.one[0] || hs[0].id != 2 || hs[1].id != 5 {
		t.Fatalf("two holders: %+v", hs)
	}
	// Grow through several size classes, then shrink back.
	for id := uint32(100); id < 200; id++ {
		at, _ := tr.find(n, id)
		tr.insertHolder(n, at, holder{ext: kv.ExternalBlockHash(id), id: id, pos: id})
	}
	if got := tr.holders(n); len(got) != 102 || got[0].id != 2 || got[1].id != 5 || got[101].id != 199 || got[50].pos != 148 {
		t.Fatalf("after 100 more holders: %d, first %+v", len(got), got[:2])
	}
	for id := uint32(100); id < 200; id++ {
		at, ok := tr.find(n, id)
		if !ok {
			t.Fatalf("holder %d lost", id)
		}
		tr.deleteHolder(n, at)
	}
	if hs := tr.holders(n); len(hs) != 2 || hs[0] != (holder{ext: 20, id: 2, pos: 3}) || hs[1] != (holder{ext: 10, id: 5, pos: 7}) {
		t.Fatalf("shrunk back to two: %+v", hs)
	}
	at, _ = tr.find(n, 2)
	tr.deleteHolder(n, at)
	if !inline() || tr.holders(n)[0] != (holder{ext: 10, id: 5, pos: 7}) {
		t.Fatalf("back to one: %+v (inline %v)", tr.holders(n), inline())
	}
	tr.deleteHolder(n, 0)
	if tr.holders(n) != nil {
		t.Fatalf("emptied: %+v", tr.holders(n))
	}
	for c := range tr.sets.classes {
		if hc := &tr.sets.classes[c]; int(hc.next) != len(hc.free) {
			t.Fatalf("class %d: %d arrays handed out, %d returned", c, hc.next, len(hc.free))
		}
	}
}

// A tree emptied by worker removals and clears gives its storage back
// (all node chunks but the root's, the holder arrays, child maps and
// fans) and then works as new.
func TestEmptiedTreeReturnsItsStorage(t *testing.T) {
	tr := NewTree()
	fill := func() {
		for w := range 8 {
			var prev uint64
			for c := range 40 { // 40 chains of 64 under a shared first block
				ev := &kv.Event{Worker: rank(kv.WorkerID(w), 0), Kind: kv.EventStored}
				if c > 0 {
					ev.HasParent, ev.ParentHash = true, kv.ExternalBlockHash(uint64(w)<<32)
				}
				for i := range 64 {
					if c == 0 && i == 0 {
						ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(uint64(w) << 32), TokensHash: 1})
						continue
					}
					prev++
					ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(uint64(w)<<32 | prev), TokensHash: kv.LocalBlockHash(mix64(uint64(w)<<20 | uint64(c)<<8 | uint64(i)))})
				}
				mustApply(t, tr, ev)
			}
		}
		if err := tr.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	fill()
	if len(tr.arena.chunks) < 2 || tr.kids.live() == 0 {
		t.Fatalf("the fill used %d chunks and %d child maps; the test needs more", len(tr.arena.chunks), tr.kids.live())
	}
	want := tr.Digest()
	for w := range 7 {
		tr.RemoveWorker(kv.WorkerID(w))
	}
	mustApply(t, tr, cleared(rank(7, 0)))
	if tr.Len() != 0 || tr.Nodes() != 0 || len(tr.arena.chunks) != 1 || tr.kids.live() != 0 || len(tr.kids.items) != 0 {
		t.Fatalf("emptied tree keeps %d entries, %d nodes, %d chunks, %d child maps", tr.Len(), tr.Nodes(), len(tr.arena.chunks), len(tr.kids.items))
	}
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	tr.RemoveWorker(7)
	fill()
	if got := tr.Digest(); got != want {
		t.Fatalf("refilled tree's digest %x, want %x", got, want)
	}
}
