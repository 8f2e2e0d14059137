package mockengine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// Errors of the running engine.
var (
	ErrBadDpRank  = errors.New("dp rank out of range")
	ErrStopped    = errors.New("engine stopped")
	ErrCancelled  = errors.New("request cancelled")
	ErrNotRunning = errors.New("engine is already running or stopped")
)

// maxLag bounds how far the real-time loop may fall behind its schedule
// (on a busy machine) before it stops trying to catch up: beyond that,
// steps would be compressed and the simulated timing would be wrong.
const maxLag = 50 * time.Millisecond

// Engine runs one Rank per data-parallel rank in real time. It is safe for
// concurrent use.
type Engine struct {
	cfg     Config
	ranks   []*rankRunner
	nextID  atomic.Uint64
	started atomic.Bool
}

// rankRunner serialises access to one rank and routes its outputs.
type rankRunner struct {
	mu      sync.Mutex
	rank    *Rank
	streams map[string]*Stream
	stopped bool
	wake    chan struct{} // capacity 1
}

// NewEngine builds an engine. onEvent receives every KV event of every
// rank, in order per rank; it is called with that rank's lock held, so it
// must return quickly and must not call the engine.
func NewEngine(cfg Config, onEvent func(kv.Event)) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg}
	for i := range cfg.DPSize {
		r, err := NewRank(cfg, uint32(i), onEvent)
		if err != nil {
			return nil, err
		}
		e.ranks = append(e.ranks, &rankRunner{rank: r, streams: map[string]*Stream{}, wake: make(chan struct{}, 1)})
	}
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Submit queues a request on dpRank, or on the least loaded rank when
// dpRank is negative. An empty req.ID gets a fresh one.
func (e *Engine) Submit(req Request, dpRank int) (*Stream, error) {
	if dpRank >= len(e.ranks) {
		return nil, fmt.Errorf("%w: %d, the engine has %d", ErrBadDpRank, dpRank, len(e.ranks))
	}
	if dpRank < 0 {
		dpRank = e.leastLoaded()
	}
	if req.ID == "" {
		req.ID = "req-" + strconv.FormatUint(e.nextID.Add(1), 10)
	}
	rr := e.ranks[dpRank]
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.stopped {
		return nil, ErrStopped
	}
	if err := rr.rank.Add(req); err != nil {
		return nil, err
	}
	s := newStream(req.ID, uint32(dpRank), len(req.Prompt), rr)
	rr.streams[req.ID] = s
	rr.poke()
	return s, nil
}

// leastLoaded picks the rank with the fewest requests, then the fewest
// used blocks, then the lowest index.
func (e *Engine) leastLoaded() int {
	best, bestReqs, bestUsed := 0, -1, 0
	for i, rr := range e.ranks {
		rr.mu.Lock()
		st := rr.rank.Stats()
		rr.mu.Unlock()
		reqs := st.Running + st.Waiting
		if bestReqs < 0 || reqs < bestReqs || (reqs == bestReqs && st.UsedBlocks < bestUsed) {
			best, bestReqs, bestUsed = i, reqs, st.UsedBlocks
		}
	}
	return best
}

// Stats returns a snapshot of every rank.
func (e *Engine) Stats() []Stats {
	out := make([]Stats, len(e.ranks))
	for i, rr := range e.ranks {
		rr.mu.Lock()
		out[i] = rr.rank.Stats()
		rr.mu.Unlock()
	}
	return out
}

// ResetPrefixCache clears every rank's prefix cache (each emits Cleared).
// It fails, clearing nothing more, at the first rank with requests in
// flight.
func (e *Engine) ResetPrefixCache() error {
	for i, rr := range e.ranks {
		rr.mu.Lock()
		err := rr.rank.ResetPrefixCache()
		rr.mu.Unlock()
		if err != nil {
			return fmt.Errorf("reset rank %d: %w", i, err)
		}
	}
	return nil
}

// ErrRankRestarted ends the requests of a rank whose engine core restarted.
var ErrRankRestarted = errors.New("dp rank restarted")

// RestartRank restarts one dp rank's engine core (Rank.Restart): its
// requests fail with ErrRankRestarted, its cache is emptied, its event
// ids start again from 0 and it announces Cleared. The other ranks keep
// serving and keep their caches, as in vLLM with data parallelism, where
// every rank is an engine core of its own.
func (e *Engine) RestartRank(dpRank int) error {
	rr, err := e.rank(dpRank)
	if err != nil {
		return err
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	for _, id := range rr.rank.Restart() {
		if s := rr.streams[id]; s != nil {
			s.end(ErrRankRestarted)
			delete(rr.streams, id)
		}
	}
	rr.poke()
	return nil
}

// ResetRankPrefixCache clears one rank's prefix cache (it emits Cleared);
// the other ranks keep theirs. It fails while the rank has requests in
// flight.
func (e *Engine) ResetRankPrefixCache(dpRank int) error {
	rr, err := e.rank(dpRank)
	if err != nil {
		return err
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return rr.rank.ResetPrefixCache()
}

func (e *Engine) rank(dpRank int) (*rankRunner, error) {
	if dpRank < 0 || dpRank >= len(e.ranks) {
		return nil, fmt.Errorf("%w: %d, the engine has %d", ErrBadDpRank, dpRank, len(e.ranks))
	}
	return e.ranks[dpRank], nil
}

// Run drives every rank until ctx is done, then fails the requests still
// in flight with ErrStopped. It may be called once.
func (e *Engine) Run(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return ErrNotRunning
	}
	var wg sync.WaitGroup
	for _, rr := range e.ranks {
		wg.Go(func() { rr.run(ctx, e.cfg) })
	}
	wg.Wait()
	return nil
}

func (rr *rankRunner) poke() {
	select {
	case rr.wake <- struct{}{}:
	default:
	}
}

func (rr *rankRunner) abort(s *Stream) {
	rr.mu.Lock()
	if rr.streams[s.ID] == s {
		delete(rr.streams, s.ID)
		rr.rank.Abort(s.ID)
	}
	rr.mu.Unlock()
	s.end(ErrCancelled)
}

// run is the real-time loop of one rank: schedule, wait the step's
// scaled duration, complete, deliver. Deadlines accumulate from the first
// step after idling, so timer slack does not add up over many short steps.
func (rr *rankRunner) run(ctx context.Context, cfg Config) {
	defer rr.stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due time.Time
	for {
		rr.mu.Lock()
		b, err := rr.rank.Schedule()
		rr.mu.Unlock()
		if err != nil {
			return // only one loop schedules this rank, so this cannot happen
		}
		if b == nil {
			due = time.Time{}
			select {
			case <-rr.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		now := time.Now()
		if due.IsZero() || now.Sub(due) > maxLag {
			due = now
		}
		due = due.Add(cfg.realDuration(b.Duration))
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		rr.mu.Lock()
		outs, err := rr.rank.Complete(b)
		if err == nil {
			rr.deliver(outs)
		}
		rr.mu.Unlock()
	}
}

// deliver hands outputs to their streams; called with rr.mu held.
func (rr *rankRunner) deliver(outs []Output) {
	for _, o := range outs {
		s := rr.streams[o.RequestID]
		if s == nil {
			continue
		}
		s.push(o)
		if o.Finished {
			delete(rr.streams, o.RequestID)
		}
	}
}

// stop fails every stream still open and refuses new requests.
func (rr *rankRunner) stop() {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.stopped = true
	for id, s := range rr.streams {
		rr.rank.Abort(id)
		s.end(ErrStopped)
		delete(rr.streams, id)
	}
}
