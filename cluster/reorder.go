package cluster

import (
	"maps"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/messages"
)

// maxReorderPending bounds the events held back waiting for a missing Seq;
// beyond it the gap is declared lost at once.
const maxReorderPending = 1 << 16

// reorderBuffer releases one origin's events in Seq order. Events can
// arrive out of order because UDP packets and separate TCP streams race;
// a gap is waited for until a deadline, then skipped.
//
// Until the stream's start is known (Seq 1 seen, a digest matched, or a
// full state applied) events are held: met mid-stream, an origin's first
// arrivals may be reordered, so the earliest one is not a safe baseline.
// If the start stays unknown for the gap timeout, skip takes the lowest
// Seq held as the baseline (without counting earlier Seqs as lost).
type reorderBuffer struct {
	next     uint64 // next Seq to release; 0 while the start is unknown
	pending  map[uint64]*messages.SequenceEvent
	high     uint64    // highest Seq known to exist (buffered or digested)
	gapSince time.Time // when the current gap was first seen
}

// started reports whether a baseline Seq was set.
func (b *reorderBuffer) started() bool { return b.next != 0 }

// waiting reports whether a gap is open (events held for a missing Seq).
func (b *reorderBuffer) waiting() bool { return !b.gapSince.IsZero() }

// applied is the last Seq released (0 before any).
func (b *reorderBuffer) applied() uint64 {
	if b.next == 0 {
		return 0
	}
	return b.next - 1
}

// reset sets the baseline so that the next released event is seq+1, and
// drops what is held at or below it.
func (b *reorderBuffer) reset(seq uint64, now time.Time) {
	b.next = seq + 1
	for s := range b.pending {
		if s <= seq {
			delete(b.pending, s)
		}
	}
	b.noteGap(now)
}

// offer takes an event; it returns the events now releasable in order and
// whether ev was stale (at or below what was already released).
func (b *reorderBuffer) offer(ev *messages.SequenceEvent, now time.Time, out []*messages.SequenceEvent) ([]*messages.SequenceEvent, bool) {
	s := ev.GetSeq()
	if b.next == 0 && s == 1 {
		b.next = 1 // we see this origin from its first event
	}
	if b.next != 0 && s < b.next {
		return out, true
	}
	if b.pending == nil {
		b.pending = make(map[uint64]*messages.SequenceEvent)
	}
	if _, dup := b.pending[s]; dup {
		return out, true
	}
	b.pending[s] = ev
	b.high = max(b.high, s)
	out = b.drain(out)
	b.noteGap(now)
	return out, false
}

// know records that Seq seq exists (from a digest), so a lost tail of the
// stream counts as a gap too.
func (b *reorderBuffer) know(seq uint64, now time.Time) {
	b.high = max(b.high, seq)
	b.noteGap(now)
}

func (b *reorderBuffer) drain(out []*messages.SequenceEvent) []*messages.SequenceEvent {
	if b.next == 0 {
		return out
	}
	for {
		ev, ok := b.pending[b.next]
		if !ok {
			return out
		}
		delete(b.pending, b.next)
		out = append(out, ev)
		b.next++
	}
}

func (b *reorderBuffer) noteGap(now time.Time) {
	switch {
	case b.next == 0 && len(b.pending) == 0, b.next != 0 && b.high < b.next:
		b.gapSince = time.Time{}
	case b.gapSince.IsZero():
		b.gapSince = now
	}
}

// expired reports whether a gap has been open longer than timeout, or the
// buffer outgrew its bound.
func (b *reorderBuffer) expired(now time.Time, timeout time.Duration) bool {
	if b.gapSince.IsZero() {
		return false
	}
	return now.Sub(b.gapSince) >= timeout || len(b.pending) >= maxReorderPending
}

// skip gives up on the missing Seqs: it releases everything buffered in
// order, jumping over holes, and returns how many Seqs were lost.
func (b *reorderBuffer) skip(now time.Time, out []*messages.SequenceEvent) ([]*messages.SequenceEvent, uint64) {
	var lost uint64
	if b.next == 0 {
		if len(b.pending) == 0 {
			return out, 0
		}
		b.next = slices.Min(slices.Collect(maps.Keys(b.pending)))
	}
	for len(b.pending) > 0 {
		if _, ok := b.pending[b.next]; !ok {
			lost++
			b.next++
			continue
		}
		out = b.drain(out)
	}
	if b.high >= b.next {
		lost += b.high - b.next + 1 // a lost tail known only from a digest
		b.next = b.high + 1
	}
	b.noteGap(now)
	return out, lost
}
