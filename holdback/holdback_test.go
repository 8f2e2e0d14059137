package holdback

import (
	"errors"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

func stored(w uint64, id uint64, blocks int) kv.Event {
	ev := kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(w)}, EventID: id, Kind: kv.EventStored}
	for i := range blocks {
		ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(i + 1)})
	}
	return ev
}

func TestHoldReleaseInOrder(t *testing.T) {
	b, err := New(Config{MaxBlocks: 10, MaxAge: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(100, 0)
	for i, ev := range []kv.Event{stored(1, 1, 3), stored(2, 1, 2), stored(1, 2, 1)} {
		if err := b.Hold(ev, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if b.Blocks() != 6 || b.Workers()[1] != 4 {
		t.Fatalf("held %d blocks, worker 1 %d", b.Blocks(), b.Workers()[1])
	}
	got := b.Release(1)
	if len(got) != 2 || got[0].EventID != 1 || got[1].EventID != 2 {
		t.Fatalf("released %+v, want events 1 then 2", got)
	}
	if b.Blocks() != 2 || b.Release(1) != nil {
		t.Fatalf("after release: %d blocks", b.Blocks())
	}
}

func TestBoundAndExpiry(t *testing.T) {
	b, _ := New(Config{MaxBlocks: 5, MaxAge: 10 * time.Second})
	t0 := time.Unix(100, 0)
	if err := b.Hold(stored(1, 1, 4), t0); err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(stored(2, 1, 2), t0); !errors.Is(err, ErrFull) {
		t.Fatalf("over the bound: %v", err)
	}
	if b.Blocks() != 4 {
		t.Fatalf("a refused event changed the buffer: %d", b.Blocks())
	}
	// A removal or clear costs at least one block.
	if err := b.Hold(kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 3}, Kind: kv.EventCleared}, t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := b.Expire(t0.Add(11 * time.Second)); n != 1 || b.Blocks() != 1 {
		t.Fatalf("expired %d, %d blocks left; want 1 and 1", n, b.Blocks())
	}
	if n := b.Forget(3); n != 1 || b.Blocks() != 0 {
		t.Fatalf("forgot %d, %d blocks left", n, b.Blocks())
	}
}

func TestClearSupersedesHeldEvents(t *testing.T) {
	b, _ := New(Config{MaxBlocks: 100, MaxAge: time.Minute})
	now := time.Unix(0, 0)
	_ = b.Hold(stored(1, 1, 5), now)
	if err := b.Hold(kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 1}, EventID: 2, Kind: kv.EventCleared}, now); err != nil {
		t.Fatal(err)
	}
	if got := b.Release(1); len(got) != 1 || got[0].Kind != kv.EventCleared || b.Blocks() != 0 {
		t.Fatalf("released %+v, %d blocks", got, b.Blocks())
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("zero config accepted")
	}
}

// A clear from one dp rank supersedes that rank's held events only: the
// worker's other ranks have caches of their own (Dynamo scopes Cleared to
// the (worker_id, dp_rank) that sent it).
func TestClearSupersedesOnlyItsRank(t *testing.T) {
	b, _ := New(Config{MaxBlocks: 100, MaxAge: time.Minute})
	now := time.Unix(0, 0)
	onRank := func(ev kv.Event, dp uint32) kv.Event { ev.Worker.DpRank = dp; return ev }
	for _, ev := range []kv.Event{
		onRank(stored(1, 1, 2), 0),
		onRank(stored(1, 1, 3), 1),
		onRank(stored(1, 1, 4), 2),
		onRank(stored(1, 2, 1), 1),
		{Worker: kv.WorkerWithDpRank{WorkerID: 1, DpRank: 1}, EventID: 3, Kind: kv.EventCleared},
	} {
		if err := b.Hold(ev, now); err != nil {
			t.Fatal(err)
		}
	}
	if b.Blocks() != 2+4+1 {
		t.Fatalf("held %d blocks, want rank 0's 2, rank 2's 4 and the clear's 1", b.Blocks())
	}
	got := b.Release(1)
	type key struct {
		dp   uint32
		kind kv.EventKind
	}
	var keys []key
	for _, ev := range got {
		keys = append(keys, key{ev.Worker.DpRank, ev.Kind})
	}
	want := []key{{0, kv.EventStored}, {2, kv.EventStored}, {1, kv.EventCleared}}
	if len(keys) != len(want) {
		t.Fatalf("released %v, want %v", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("released %v, want %v (arrival order kept)", keys, want)
		}
	}
}

// A clear arriving at a full buffer first frees what it supersedes.
func TestClearFreesRoomForItself(t *testing.T) {
	b, _ := New(Config{MaxBlocks: 3, MaxAge: time.Minute})
	now := time.Unix(0, 0)
	if err := b.Hold(stored(1, 1, 3), now); err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 1}, EventID: 2, Kind: kv.EventCleared}, now); err != nil {
		t.Fatalf("clear refused by a buffer full of what it supersedes: %v", err)
	}
	if b.Blocks() != 1 {
		t.Fatalf("held %d blocks, want the clear's 1", b.Blocks())
	}
}
