package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/messages"
)

func seqs(evs []*messages.SequenceEvent) []uint64 {
	out := make([]uint64, len(evs))
	for i, ev := range evs {
		out[i] = ev.GetSeq()
	}
	return out
}

func TestReorderBufferReleasesInOrder(t *testing.T) {
	t0 := time.Unix(0, 0)
	tests := []struct {
		name     string
		arrivals []uint64
		want     []uint64
		stale    int
		gapOpen  bool
	}{
		{"in order", []uint64{1, 2, 3}, []uint64{1, 2, 3}, 0, false},
		{"swapped", []uint64{1, 3, 2, 4}, []uint64{1, 2, 3, 4}, 0, false},
		{"duplicate", []uint64{1, 2, 2, 1}, []uint64{1, 2}, 2, false},
		{"hole", []uint64{1, 3, 4}, []uint64{1}, 0, true},
		{"met mid-stream: held", []uint64{6, 5}, nil, 0, true},
		{"start arrives late", []uint64{2, 3, 1}, []uint64{1, 2, 3}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b reorderBuffer
			var got []uint64
			stale := 0
			for _, s := range tt.arrivals {
				out, isStale := b.offer(&messages.SequenceEvent{Seq: s}, t0, nil)
				if isStale {
					stale++
				}
				got = append(got, seqs(out)...)
			}
			if !slices.Equal(got, tt.want) || stale != tt.stale {
				t.Fatalf("released %v (stale %d), want %v (stale %d)", got, stale, tt.want, tt.stale)
			}
			if open := b.expired(t0.Add(time.Hour), time.Second); open != tt.gapOpen {
				t.Fatalf("gap open = %v, want %v", open, tt.gapOpen)
			}
		})
	}
}

func TestReorderBufferSkipsExpiredGap(t *testing.T) {
	t0 := time.Unix(0, 0)
	var b reorderBuffer
	b.offer(&messages.SequenceEvent{Seq: 1}, t0, nil)
	b.offer(&messages.SequenceEvent{Seq: 3}, t0, nil)
	b.offer(&messages.SequenceEvent{Seq: 6}, t0.Add(10*time.Millisecond), nil)
	if b.expired(t0.Add(49*time.Millisecond), 50*time.Millisecond) {
		t.Fatal("gap expired early")
	}
	if !b.expired(t0.Add(50*time.Millisecond), 50*time.Millisecond) {
		t.Fatal("gap did not expire")
	}
	out, lost := b.skip(t0.Add(50*time.Millisecond), nil)
	if got := seqs(out); !slices.Equal(got, []uint64{3, 6}) || lost != 3 {
		t.Fatalf("skip released %v, lost %d; want [3 6], 3", got, lost)
	}
	if b.applied() != 6 || b.expired(t0.Add(time.Hour), time.Millisecond) {
		t.Fatalf("after skip: applied %d, gap still open", b.applied())
	}
}

func TestReorderBufferMidStreamBaseline(t *testing.T) {
	t0 := time.Unix(0, 0)
	var b reorderBuffer
	b.offer(&messages.SequenceEvent{Seq: 41}, t0, nil)
	b.offer(&messages.SequenceEvent{Seq: 40}, t0, nil)
	b.offer(&messages.SequenceEvent{Seq: 43}, t0, nil)
	if b.started() || !b.expired(t0.Add(time.Second), time.Second) {
		t.Fatal("unknown start not held as a gap")
	}
	out, lost := b.skip(t0, nil)
	// Seqs below 40 predate us: not lost. 42 is.
	if got := seqs(out); !slices.Equal(got, []uint64{40, 41, 43}) || lost != 1 {
		t.Fatalf("skip released %v, lost %d; want [40 41 43], 1", got, lost)
	}
}

func TestReorderBufferLostTailFromDigest(t *testing.T) {
	t0 := time.Unix(0, 0)
	var b reorderBuffer
	b.offer(&messages.SequenceEvent{Seq: 1}, t0, nil)
	b.know(4, t0) // a digest says Seq 4 exists; 2..4 never arrive
	if !b.expired(t0.Add(time.Second), time.Second) {
		t.Fatal("lost tail not seen as a gap")
	}
	out, lost := b.skip(t0, nil)
	if len(out) != 0 || lost != 3 || b.applied() != 4 {
		t.Fatalf("skip: released %v, lost %d, applied %d", seqs(out), lost, b.applied())
	}
}

func TestReorderBufferReset(t *testing.T) {
	t0 := time.Unix(0, 0)
	var b reorderBuffer
	b.offer(&messages.SequenceEvent{Seq: 1}, t0, nil)
	b.offer(&messages.SequenceEvent{Seq: 4}, t0, nil)
	b.offer(&messages.SequenceEvent{Seq: 6}, t0, nil)
	b.reset(4, t0) // a snapshot covers up to 4
	if out := b.drain(nil); len(out) != 0 || b.applied() != 4 {
		t.Fatalf("after reset: released %v, applied %d", seqs(out), b.applied())
	}
	out, _ := b.offer(&messages.SequenceEvent{Seq: 5}, t0, nil)
	if got := seqs(out); !slices.Equal(got, []uint64{5, 6}) {
		t.Fatalf("released %v, want [5 6]", got)
	}
}
