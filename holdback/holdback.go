// Package holdback keeps the KV events of workers that have not
// registered (yet), so a publisher cannot make the index grow with blocks
// of workers nobody routes to, while events that merely arrive before
// their worker's first heartbeat are still applied once it registers.
//
// The buffer is bounded by blocks and by age; what does not fit, or waits
// too long, is dropped and counted by the caller. The package is pure:
// time is passed in.
package holdback

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// ErrFull: holding the event would pass the block bound.
var ErrFull = errors.New("holdback buffer full")

// Config bounds the buffer.
type Config struct {
	MaxBlocks int           // blocks held over all workers (> 0)
	MaxAge    time.Duration // an event older than this is dropped (> 0)
}

type held struct {
	ev     kv.Event
	at     time.Time
	blocks int
}

// Buffer holds events per worker, in arrival order.
type Buffer struct {
	cfg      Config
	byWorker map[kv.WorkerID][]held
	blocks   int
}

// New returns an empty buffer.
func New(cfg Config) (*Buffer, error) {
	if cfg.MaxBlocks <= 0 || cfg.MaxAge <= 0 {
		return nil, fmt.Errorf("holdback: max blocks and max age must be > 0, got %d and %v", cfg.MaxBlocks, cfg.MaxAge)
	}
	return &Buffer{cfg: cfg, byWorker: map[kv.WorkerID][]held{}}, nil
}

// size is what an event costs against the bound: its blocks, at least 1.
func size(ev *kv.Event) int {
	return max(len(ev.Blocks)+len(ev.Removed), 1)
}

// Hold keeps ev until its worker registers. A full buffer refuses it
// (ErrFull) and keeps what it holds: older events are the ones a worker
// that registers soon needs first. A Cleared event first drops what its
// (worker, dp_rank) holds.
func (b *Buffer) Hold(ev kv.Event, now time.Time) error {
	if ev.Kind == kv.EventCleared {
		// A clear makes everything its rank sent before it moot (on every
		// tier, as the index applies it); the worker's other dp ranks
		// have their own caches, and their held events still count.
		// Forgotten first: what it supersedes frees room for it.
		b.forgetRank(ev.Worker)
	}
	n := size(&ev)
	if b.blocks+n > b.cfg.MaxBlocks {
		return fmt.Errorf("holding %d blocks of worker %d: %d of %d held: %w", n, ev.Worker.WorkerID, b.blocks, b.cfg.MaxBlocks, ErrFull)
	}
	b.byWorker[ev.Worker.WorkerID] = append(b.byWorker[ev.Worker.WorkerID], held{ev: ev, at: now, blocks: n})
	b.blocks += n
	return nil
}

// Release hands back a worker's held events, oldest first, and forgets
// them.
func (b *Buffer) Release(w kv.WorkerID) []kv.Event {
	hs := b.byWorker[w]
	if len(hs) == 0 {
		return nil
	}
	out := make([]kv.Event, len(hs))
	for i, h := range hs {
		out[i] = h.ev
		b.blocks -= h.blocks
	}
	delete(b.byWorker, w)
	return out
}

// Forget drops a worker's held events (it was removed) and returns how
// many there were.
func (b *Buffer) Forget(w kv.WorkerID) int {
	hs := b.byWorker[w]
	for _, h := range hs {
		b.blocks -= h.blocks
	}
	delete(b.byWorker, w)
	return len(hs)
}

// forgetRank drops the held events of one (worker, dp_rank), keeping the
// order of the rest.
func (b *Buffer) forgetRank(r kv.WorkerWithDpRank) {
	hs := b.byWorker[r.WorkerID]
	kept := hs[:0]
	for _, h := range hs {
		if h.ev.Worker == r {
			b.blocks -= h.blocks
			continue
		}
		kept = append(kept, h)
	}
	clear(hs[len(kept):]) // do not pin the dropped events' slices
	if len(kept) == 0 {
		delete(b.byWorker, r.WorkerID)
		return
	}
	b.byWorker[r.WorkerID] = kept
}

// Expire drops every event held longer than MaxAge and returns how many.
func (b *Buffer) Expire(now time.Time) int {
	n := 0
	for _, c := range b.ExpireRanks(now) {
		n += c
	}
	return n
}

// ExpireRanks is Expire reporting how many events of each (worker,
// dp_rank) it dropped, so the caller can name them. Events are held in
// arrival order per worker, so each list is cut at its first young event.
func (b *Buffer) ExpireRanks(now time.Time) map[kv.WorkerWithDpRank]int {
	var dropped map[kv.WorkerWithDpRank]int
	for w, hs := range b.byWorker {
		i := 0
		for i < len(hs) && now.Sub(hs[i].at) > b.cfg.MaxAge {
			if dropped == nil {
				dropped = map[kv.WorkerWithDpRank]int{}
			}
			dropped[hs[i].ev.Worker]++
			b.blocks -= hs[i].blocks
			i++
		}
		if i == len(hs) {
			delete(b.byWorker, w)
		} else if i > 0 {
			b.byWorker[w] = append([]held(nil), hs[i:]...)
		}
	}
	return dropped
}

// Blocks is what the buffer holds against its bound.
func (b *Buffer) Blocks() int { return b.blocks }

// Workers lists the workers with held events and their held blocks.
func (b *Buffer) Workers() map[kv.WorkerID]int {
	out := make(map[kv.WorkerID]int, len(b.byWorker))
	for w, hs := range b.byWorker {
		for _, h := range hs {
			out[w] += h.blocks
		}
	}
	return out
}
