package mockengine

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// Request is one completion submitted to a rank.
type Request struct {
	ID        string
	Prompt    []uint32
	MaxTokens int
}

// Output is one generated token, reported when the step that produced it
// completes.
type Output struct {
	RequestID string
	Token     uint32
	// Index is the token's position among the generated tokens, from 0.
	Index    int
	Finished bool
	// PromptTokens and CachedTokens describe the prompt: CachedTokens were
	// found in the prefix cache when the request was first scheduled.
	PromptTokens int
	CachedTokens int
	// Arrived and At are model times: when the request was added and when
	// this token became available. For Index 0, At-Arrived is the TTFT.
	Arrived time.Duration
	At      time.Duration
}

// Errors a caller can match.
var (
	ErrEmptyPrompt      = errors.New("prompt must not be empty")
	ErrBadMaxTokens     = errors.New("max_tokens must be at least 1")
	ErrRequestTooLarge  = errors.New("request needs more KV blocks than the rank has")
	ErrDuplicateRequest = errors.New("request id already in flight")
	ErrBatchInFlight    = errors.New("a batch is already scheduled and not completed")
	ErrForeignBatch     = errors.New("batch was not scheduled by this rank or already completed")
)

type seqState uint8

const (
	seqWaiting seqState = iota
	seqRunning
	seqDone
)

// sequence is a request's state inside the rank. tokens holds the prompt
// and every generated token; computed counts the tokens whose KV is in the
// request's blocks; stored counts the leading blocks registered in the
// prefix cache.
type sequence struct {
	req          Request
	state        seqState
	tokens       []uint32
	locals       []kv.LocalBlockHash
	hashes       []kv.SequenceHash
	blocks       []*block
	computed     int
	stored       int
	generated    int
	seed         uint64 // the generator's state (tokens.go)
	queried      bool
	cachedTokens int
	arrived      time.Duration
}

// Batch is one scheduled step: which requests advance by how many tokens,
// and how long that takes in model time.
type Batch struct {
	Duration      time.Duration
	PrefillTokens int
	DecodeSeqs    int
	// DecodeContext is the KV tokens the decoding requests attend over.
	DecodeContext int
	rank          *Rank
	items         []batchItem
}

type batchItem struct {
	seq    *sequence
	tokens int
}

// Stats is a snapshot of one rank, in vLLM's terms.
type Stats struct {
	DpRank       uint32
	Running      int
	Waiting      int
	UsedBlocks   int // referenced by running requests
	CachedBlocks int // registered in the prefix cache (referenced or not)
	TotalBlocks  int
	// KVUsage is UsedBlocks/TotalBlocks: evictable cached blocks count as
	// free, as vLLM's kv_cache_usage_perc.
	KVUsage float64
	// PrefixQueries and PrefixHits count prompt tokens looked up in, and
	// found in, the prefix cache on each request's first scheduling.
	PrefixQueries uint64
	PrefixHits    uint64
	// Restarts counts Restart calls (the rank's engine core restarting).
	Restarts         uint64
	Preemptions      uint64
	PromptTokens     uint64
	GenerationTokens uint64
	FinishedRequests uint64
	// Now is the rank's model time.
	Now time.Duration
}

// Rank is the deterministic engine of one data-parallel rank: a paged KV
// cache and a continuous-batching scheduler. It is not safe for concurrent
// use; Engine serialises access. emit receives every KV event in order and
// must not call back into the rank.
type Rank struct {
	cfg         Config
	dpRank      uint32
	pool        *blockPool
	waiting     []*sequence
	running     []*sequence
	byID        map[string]*sequence
	emit        func(kv.Event)
	nextEventID uint64
	now         time.Duration
	inFlight    *Batch
	stats       Stats
}

// NewRank returns an idle rank with an empty cache. cfg must be valid.
func NewRank(cfg Config, dpRank uint32, emit func(kv.Event)) (*Rank, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if emit == nil {
		emit = func(kv.Event) {}
	}
	return &Rank{
		cfg: cfg, dpRank: dpRank, pool: newBlockPool(cfg.TotalKVBlocks),
		byID: make(map[string]*sequence), emit: emit,
	}, nil
}

// Add queues a request. It fails if the request could never fit in the
// cache even alone, so a queued request always makes progress eventually.
func (r *Rank) Add(req Request) error {
	switch {
	case len(req.Prompt) == 0:
		return ErrEmptyPrompt
	case req.MaxTokens < 1:
		return ErrBadMaxTokens
	case r.byID[req.ID] != nil:
		return fmt.Errorf("%w: %q", ErrDuplicateRequest, req.ID)
	}
	// The last generated token is never fed back, so it needs no slot.
	if need := ceilDiv(len(req.Prompt)+req.MaxTokens-1, r.cfg.BlockSize); need > r.cfg.TotalKVBlocks {
		return fmt.Errorf("%w: %d prompt + %d output tokens need %d blocks of %d tokens, the rank has %d",
			ErrRequestTooLarge, len(req.Prompt), req.MaxTokens, need, r.cfg.BlockSize, r.cfg.TotalKVBlocks)
	}
	s := &sequence{
		req: req, tokens: append(make([]uint32, 0, len(req.Prompt)+req.MaxTokens), req.Prompt...),
		seed: outputSeed(req.Prompt), arrived: r.now,
	}
	r.byID[req.ID] = s
	r.waiting = append(r.waiting, s)
	return nil
}

// Abort drops a request wherever it is, releasing its blocks. It reports
// whether the request was known.
func (r *Rank) Abort(id string) bool {
	s := r.byID[id]
	if s == nil {
		return false
	}
	switch s.state {
	case seqWaiting:
		r.waiting = removeSeq(r.waiting, s)
	case seqRunning:
		r.running = removeSeq(r.running, s)
		r.releaseBlocks(s)
	}
	s.state = seqDone
	delete(r.byID, id)
	return true
}

// Idle reports whether the rank has nothing to run.
func (r *Rank) Idle() bool { return len(r.running) == 0 && len(r.waiting) == 0 }

// Now is the rank's model time: the sum of the completed steps.
func (r *Rank) Now() time.Duration { return r.now }

// AdvanceTo moves the model clock forward to t while no batch is in
// flight, for offline simulations in which a rank sits idle until the next
// arrival. Earlier times are ignored: the clock never goes back.
func (r *Rank) AdvanceTo(t time.Duration) {
	if r.inFlight == nil && t > r.now {
		r.now = t
	}
}

// CachedPrefixTokens is how many leading tokens of prompt a request
// admitted now would find in the prefix cache (the last block is always
// recomputed, so at most len(prompt)-1, rounded down to a block).
func (r *Rank) CachedPrefixTokens(prompt []uint32) int {
	bs := r.cfg.BlockSize
	_, hashes := chainedHashes(prompt[:(max(len(prompt)-1, 0)/bs)*bs], bs, nil, nil)
	n := 0
	for _, h := range hashes {
		if r.pool.lookup(h) == nil {
			break
		}
		n++
	}
	return n * bs
}

// Step schedules and completes one batch at once, for callers that keep
// model time only (tests, offline simulation). It returns nil outputs and
// false when the rank is idle.
func (r *Rank) Step() ([]Output, bool) {
	b, err := r.Schedule()
	if err != nil || b == nil {
		return nil, false
	}
	out, _ := r.Complete(b) // fails only for another rank's batch; b is this rank's
	return out, true
}

// ResetPrefixCache forgets every cached block and emits Cleared. It fails
// with ErrCacheInUse while requests hold blocks.
func (r *Rank) ResetPrefixCache() error {
	if err := r.pool.clear(); err != nil {
		return err
	}
	r.emitEvent(kv.Event{Kind: kv.EventCleared})
	return nil
}

// Restart is the rank's engine core dying and coming back, on its own
// (with data parallelism each rank is an engine core of its own): every
// request it had is dropped (their ids are returned, so the caller can
// fail them), its cache starts empty, its event ids start again from 0,
// and the new core announces Cleared. The worker's other ranks are not
// touched. The model clock keeps running.
func (r *Rank) Restart() []string {
	ids := make([]string, 0, len(r.byID))
	for id := range r.byID {
		ids = append(ids, id)
	}
	for _, id := range ids {
		r.Abort(id)
	}
	r.inFlight = nil // a batch still in flight belongs to the dead core
	r.pool = newBlockPool(r.cfg.TotalKVBlocks)
	r.nextEventID = 0
	r.stats.Restarts++
	r.emitEvent(kv.Event{Kind: kv.EventCleared})
	return ids
}

// Stats returns a snapshot of the rank.
func (r *Rank) Stats() Stats {
	s := r.stats
	s.DpRank = r.dpRank
	s.Running, s.Waiting = len(r.running), len(r.waiting)
	s.UsedBlocks, s.CachedBlocks, s.TotalBlocks = r.pool.used, r.pool.cachedBlocks(), r.pool.total
	s.KVUsage = float64(r.pool.used) / float64(r.pool.total)
	s.Now = r.now
	return s
}

func (r *Rank) emitEvent(ev kv.Event) {
	ev.Worker = kv.WorkerWithDpRank{WorkerID: r.cfg.WorkerID, DpRank: r.dpRank}
	ev.EventID = r.nextEventID
	ev.Tier = kv.TierDevice
	r.nextEventID++
	r.emit(ev)
}

func removeSeq(list []*sequence, s *sequence) []*sequence {
	for i, x := range list {
		if x == s {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
