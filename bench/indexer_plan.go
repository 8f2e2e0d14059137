package bench

import (
	"container/list"
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// ErrBadIndexerPlan marks an indexer-benchmark configuration that cannot run.
var ErrBadIndexerPlan = errors.New("bad indexer benchmark config")

// IndexerPlanConfig shapes the KV events a trace replay produces.
type IndexerPlanConfig struct {
	// Workers is how many engines the trace's requests are spread over.
	Workers int
	// BlockSize is the router's block size; it must divide 512 so each
	// trace block maps onto whole router blocks.
	BlockSize int
	// CapacityBlocks is each worker's cache size in router blocks; the
	// least recently used blocks are removed to stay under it.
	CapacityBlocks int
}

// Validate rejects plans that cannot be generated.
func (c IndexerPlanConfig) Validate() error {
	if c.Workers <= 0 {
		return fmt.Errorf("%w: workers must be > 0, got %d", ErrBadIndexerPlan, c.Workers)
	}
	if c.BlockSize <= 0 || TraceBlockTokens%c.BlockSize != 0 {
		return fmt.Errorf("%w: block size %d must divide %d", ErrBadIndexerPlan, c.BlockSize, TraceBlockTokens)
	}
	if c.CapacityBlocks <= 0 {
		return fmt.Errorf("%w: capacity must be > 0 blocks, got %d", ErrBadIndexerPlan, c.CapacityBlocks)
	}
	return nil
}

// IndexerStep is what one trace request does to the fleet: the worker it
// lands on stores the blocks of its prompt it did not hold, and removes
// what no longer fits.
type IndexerStep struct {
	Worker kv.WorkerID
	// Events are a Removed event (when something was evicted) and a
	// Stored event (when something new was cached), in that order.
	Events []*kv.Event
	// Blocks is the number of full router blocks in the prompt.
	Blocks int
}

// IndexerPlanner turns trace records into KV events one request at a
// time, so a full replay never holds every event in memory. Requests go
// to workers round-robin. Not safe for concurrent use.
type IndexerPlanner struct {
	cfg     IndexerPlanConfig
	local   map[uint64][]kv.LocalBlockHash // per hash id, its router blocks
	workers []*workerCache
	next    int
	eventID uint64
	cached  int // blocks held over every worker's cache
}

// CachedBlocks is how many blocks the planned fleet holds now, over all
// workers (at most Workers × CapacityBlocks).
func (p *IndexerPlanner) CachedBlocks() int { return p.cached }

// NewIndexerPlanner validates cfg and returns an empty fleet.
func NewIndexerPlanner(cfg IndexerPlanConfig) (*IndexerPlanner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &IndexerPlanner{cfg: cfg, local: make(map[uint64][]kv.LocalBlockHash), workers: make([]*workerCache, cfg.Workers)}
	for i := range p.workers {
		p.workers[i] = newWorkerCache()
	}
	return p, nil
}

// WorkerID is the id the plan gives its i-th worker (ids start at 1 so
// none is the zero value).
func WorkerID(i int) kv.WorkerID { return kv.WorkerID(i + 1) }

// LocalHashes returns the router-block content hashes of a record's
// prompt: only full blocks, as an engine only caches full blocks.
func (p *IndexerPlanner) LocalHashes(rec TraceRecord) ([]kv.LocalBlockHash, error) {
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	per := TraceBlockTokens / p.cfg.BlockSize
	out := make([]kv.LocalBlockHash, 0, len(rec.HashIDs)*per)
	for _, id := range rec.HashIDs {
		h, ok := p.local[id]
		if !ok {
			h = hashing.BlockHashes(TraceBlock(id), p.cfg.BlockSize, hashing.Options{})
			p.local[id] = h
		}
		out = append(out, h...)
	}
	return out[:rec.InputLength/p.cfg.BlockSize], nil
}

// Step places the next record on its worker and returns the events that
// placement publishes.
func (p *IndexerPlanner) Step(rec TraceRecord) (IndexerStep, error) {
	local, err := p.LocalHashes(rec)
	if err != nil {
		return IndexerStep{}, err
	}
	wi := p.next
	p.next = (p.next + 1) % len(p.workers)
	w := p.workers[wi]
	defer func(before int) { p.cached += w.size() - before }(w.size())
	id := WorkerID(wi)
	seqs := hashing.SequenceHashes(local)
	step := IndexerStep{Worker: id, Blocks: len(seqs)}

	held := 0
	for held < len(seqs) && w.has(seqs[held]) {
		held++
	}
	fresh := seqs[held:]
	if need := w.size() + len(fresh) - p.cfg.CapacityBlocks; need > 0 {
		evicted := w.evict(need, seqs[:held])
		if len(evicted) > 0 {
			p.eventID++
			rm := &kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: id}, EventID: p.eventID, Kind: kv.EventRemoved,
				Removed: make([]kv.ExternalBlockHash, len(evicted))}
			for i, s := range evicted {
				rm.Removed[i] = kv.ExternalBlockHash(s)
			}
			step.Events = append(step.Events, rm)
		}
	}
	// Whatever still does not fit (a prompt longer than the cache) is
	// not stored, like an engine that cannot hold it.
	if room := p.cfg.CapacityBlocks - w.size(); len(fresh) > room {
		fresh = fresh[:max(room, 0)]
	}
	// Touch the whole chain from the tail so its root ends up most
	// recent: eviction then takes leaves before the prefixes other
	// requests share, as an engine freeing a request's blocks in reverse
	// order does.
	for i := held + len(fresh) - 1; i >= 0; i-- {
		w.touch(seqs[i])
	}
	if len(fresh) == 0 {
		return step, nil
	}
	p.eventID++
	st := &kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: id}, EventID: p.eventID, Kind: kv.EventStored,
		Blocks: make([]kv.StoredBlock, len(fresh))}
	if held > 0 {
		st.HasParent, st.ParentHash = true, kv.ExternalBlockHash(seqs[held-1])
	}
	for i, s := range fresh {
		st.Blocks[i] = kv.StoredBlock{BlockHash: kv.ExternalBlockHash(s), TokensHash: local[held+i]}
	}
	step.Events = append(step.Events, st)
	return step, nil
}

// workerCache is one worker's cached blocks in LRU order (front = most
// recent), keyed by the prefix-identifying sequence hash.
type workerCache struct {
	order *list.List
	at    map[kv.SequenceHash]*list.Element
}

func newWorkerCache() *workerCache {
	return &workerCache{order: list.New(), at: make(map[kv.SequenceHash]*list.Element)}
}

func (w *workerCache) size() int { return w.order.Len() }

func (w *workerCache) has(s kv.SequenceHash) bool { _, ok := w.at[s]; return ok }

func (w *workerCache) touch(s kv.SequenceHash) {
	if e, ok := w.at[s]; ok {
		w.order.MoveToFront(e)
		return
	}
	w.at[s] = w.order.PushFront(s)
}

// evict removes up to n least recently used blocks, sparing the ones the
// current request is about to extend.
func (w *workerCache) evict(n int, keep []kv.SequenceHash) []kv.SequenceHash {
	spare := make(map[kv.SequenceHash]bool, len(keep))
	for _, s := range keep {
		spare[s] = true
	}
	var out []kv.SequenceHash
	for e := w.order.Back(); e != nil && len(out) < n; {
		prev := e.Prev()
		s := e.Value.(kv.SequenceHash)
		if !spare[s] {
			w.order.Remove(e)
			delete(w.at, s)
			out = append(out, s)
		}
		e = prev
	}
	return out
}
