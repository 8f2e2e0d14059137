package index

import (
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// Defaults of Dynamo's approximate mode (PruneConfig in approx.rs).
const (
	DefaultApproxTTL        = 120 * time.Second // router_ttl_secs
	DefaultMaxTreeSize      = 1 << 20           // router_max_tree_size, in (rank, block) entries
	DefaultPruneTargetRatio = 0.8               // router_prune_target_ratio
)

// ApproxConfig configures approximate mode. Zero fields take the defaults.
type ApproxConfig struct {
	// TTL is how long a predicted block is believed cached after the last
	// request that used it was routed.
	TTL time.Duration
	// MaxTreeSize bounds the (rank, block) entries; above it the entries
	// expiring first are pruned.
	MaxTreeSize int
	// PruneTargetRatio is the fraction of MaxTreeSize pruning goes down
	// to, so pruning runs in batches rather than on every insert.
	PruneTargetRatio float64
}

// Validate rejects settings that cannot work (zero means default).
func (c ApproxConfig) Validate() error {
	switch {
	case c.TTL < 0:
		return fmt.Errorf("approximate mode: negative ttl %s", c.TTL)
	case c.MaxTreeSize < 0:
		return fmt.Errorf("approximate mode: negative max tree size %d", c.MaxTreeSize)
	case c.PruneTargetRatio < 0 || c.PruneTargetRatio > 1:
		return fmt.Errorf("approximate mode: prune target ratio %g outside [0, 1]", c.PruneTargetRatio)
	}
	return nil
}

// withDefaults fills zero fields; invalid ones also fall back to the
// default so a constructor never builds an index that cannot prune.
func (c ApproxConfig) withDefaults() ApproxConfig {
	if c.TTL <= 0 {
		c.TTL = DefaultApproxTTL
	}
	if c.MaxTreeSize <= 0 {
		c.MaxTreeSize = DefaultMaxTreeSize
	}
	if c.PruneTargetRatio <= 0 || c.PruneTargetRatio > 1 {
		c.PruneTargetRatio = DefaultPruneTargetRatio
	}
	return c
}

// timerKey names one (rank, block) entry by the tree's interned rank id.
// Ids are reused after a worker is removed; an expiry entry left over from
// the old owner is harmless because it only acts when its deadline equals
// the live timer's.
type timerKey struct {
	id  uint32
	ext kv.ExternalBlockHash
}

type timer struct {
	at    int64  // expiry, unix nanoseconds
	depth uint32 // position in the prompt, 1-based
}

// expiry is a heap entry; its fields are laid out flat (24 bytes) rather
// than embedding timerKey, which would pad it to 32.
type expiry struct {
	at    int64
	ext   kv.ExternalBlockHash
	id    uint32
	depth uint32
}

func (e expiry) key() timerKey { return timerKey{id: e.id, ext: e.ext} }

// Approx predicts the KV cache from the router's own decisions instead of
// engine events (Dynamo's use_kv_events=false): each routed request's
// blocks are assumed cached on the chosen rank for TTL after the last use,
// and the tree is kept under MaxTreeSize entries by pruning the entries
// that would expire first.
//
// Deadlines live in a map (the truth) and a lazy min-heap (the order):
// refreshing a block pushes a new heap entry and leaves the old one stale;
// stale entries are skipped when popped and the heap is rebuilt from the
// map once they outnumber live ones.
type Approx struct {
	cfg    ApproxConfig
	tree   *Tree
	timers map[timerKey]timer
	heap   []expiry
	blocks []kv.StoredBlock // scratch for RecordDecision
}

// NewApprox returns an empty approximate index. Zero or invalid settings
// take the defaults; call ApproxConfig.Validate first to reject them.
func NewApprox(cfg ApproxConfig) *Approx {
	a := &Approx{cfg: cfg.withDefaults(), tree: NewTree(), timers: make(map[timerKey]timer)}
	a.tree.onDrop = func(id uint32, ext kv.ExternalBlockHash) {
		delete(a.timers, timerKey{id: id, ext: ext})
	}
	return a
}

// Config returns the settings in force.
func (a *Approx) Config() ApproxConfig { return a.cfg }

// RecordDecision records that the request whose block hashes are local was
// routed to worker at now: its blocks are predicted cached there until
// now+TTL. The chained sequence hash stands in for the engine block hash.
// It expires nothing; call Expire on a tick.
func (a *Approx) RecordDecision(worker kv.WorkerWithDpRank, local []kv.LocalBlockHash, now time.Time) error {
	if len(local) == 0 {
		return nil
	}
	seq := hashing.SequenceHashes(local)
	a.blocks = a.blocks[:0]
	for i, h := range local {
		a.blocks = append(a.blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[i]), TokensHash: h})
	}
	ev := kv.Event{Worker: worker, Kind: kv.EventStored, Blocks: a.blocks}
	applyErr := a.tree.Apply(&ev)
	at := now.Add(a.cfg.TTL).UnixNano()
	if id, ok := a.tree.ids[worker]; ok {
		rs := &a.tree.ranks[id]
		for i, b := range a.blocks {
			if rs.blocks.get(b.BlockHash) == 0 {
				break // the chain was cut short; nothing deeper was stored
			}
			k := timerKey{id: id, ext: b.BlockHash}
			tm := timer{at: at, depth: uint32(i + 1)}
			a.timers[k] = tm
			a.push(expiry{at: tm.at, ext: k.ext, id: k.id, depth: tm.depth})
		}
	}
	a.compactHeap()
	if a.tree.Len() > a.cfg.MaxTreeSize {
		a.prune()
	}
	if applyErr != nil {
		return fmt.Errorf("approximate index, worker %s: %w", worker, applyErr)
	}
	return nil
}

// Expire removes every predicted block whose deadline is at or before now
// and returns how many entries went.
func (a *Approx) Expire(now time.Time) int {
	limit := now.UnixNano()
	removed := 0
	for len(a.heap) > 0 && a.heap[0].at <= limit {
		removed += a.popAndDrop()
	}
	a.tree.counters.Expired += uint64(removed)
	return removed
}

// prune drops the entries expiring first until the tree is at the target
// size. Equal deadlines go deepest first, so a prefix outlives its
// extensions.
func (a *Approx) prune() {
	target := int(float64(a.cfg.MaxTreeSize) * a.cfg.PruneTargetRatio)
	removed := 0
	for a.tree.Len() > target && len(a.heap) > 0 {
		removed += a.popAndDrop()
	}
	a.tree.counters.Pruned += uint64(removed)
}

// popAndDrop pops the earliest heap entry and, when it is live, removes
// its block (and the rank's blocks below it). It returns entries removed.
func (a *Approx) popAndDrop() int {
	e := a.pop()
	tm, ok := a.timers[e.key()]
	if !ok || tm.at != e.at {
		return 0 // refreshed or already gone
	}
	n := a.tree.lookup(e.id, e.ext)
	if n == nil {
		delete(a.timers, e.key())
		return 0
	}
	return a.tree.dropSubtree(n, e.id)
}

// compactHeap rebuilds the heap from the live timers once stale entries
// outnumber them, bounding the heap at about twice the tree size.
func (a *Approx) compactHeap() {
	if len(a.heap) <= 2*len(a.timers)+1024 {
		return
	}
	a.heap = a.heap[:0]
	if cap(a.heap) > 4*len(a.timers)+2048 {
		a.heap = make([]expiry, 0, 2*len(a.timers)+1024)
	}
	for k, tm := range a.timers {
		a.heap = append(a.heap, expiry{at: tm.at, ext: k.ext, id: k.id, depth: tm.depth})
	}
	for i := len(a.heap)/2 - 1; i >= 0; i-- {
		a.down(i)
	}
}

// FindMatches scores a prompt against the predicted cache (device tier
// only).
func (a *Approx) FindMatches(hashes []kv.LocalBlockHash) TieredMatches {
	depths := a.tree.matchDepths(hashes, nil)
	out := make(TieredMatches, len(depths))
	for _, d := range depths {
		rs := &a.tree.ranks[d.id]
		out[rs.rank] = TierMatch{Device: d.depth, TreeSize: uint64(rs.blocks.len())}
	}
	return out
}

// RemoveWorker forgets every rank of a worker and their deadlines.
func (a *Approx) RemoveWorker(w kv.WorkerID) {
	a.tree.RemoveWorker(w)
	a.compactHeap()
}

// ClearRank forgets one rank's predictions and their deadlines: its engine
// announced an empty cache (a Cleared event), so what this replica routed
// there is gone too. The worker's other ranks keep theirs.
func (a *Approx) ClearRank(r kv.WorkerWithDpRank) {
	if a.tree.clearRank(r) > 0 {
		a.compactHeap()
	}
}

// WorkerBlockCounts returns the predicted block count of every rank.
func (a *Approx) WorkerBlockCounts() map[kv.WorkerWithDpRank]uint64 {
	return a.tree.WorkerBlockCounts()
}

// Len is the number of predicted (rank, block) entries.
func (a *Approx) Len() int { return a.tree.Len() }

// HeapLen is the length of the expiry heap, live and stale entries.
func (a *Approx) HeapLen() int { return len(a.heap) }

// Digest fingerprints the predicted content (see Tree.Digest).
func (a *Approx) Digest() uint64 { return a.tree.Digest() }

// Counters returns the running totals, including Expired and Pruned.
func (a *Approx) Counters() Counters { return a.tree.counters }

// CounterMap returns Counters keyed by snake_case name.
func (a *Approx) CounterMap() map[string]uint64 { return a.tree.counters.Map() }

// CheckInvariants checks the tree and that every entry has exactly one
// live deadline with a heap entry to enforce it.
func (a *Approx) CheckInvariants() error {
	if err := a.tree.CheckInvariants(); err != nil {
		return err
	}
	if len(a.timers) != a.tree.Len() {
		return fmt.Errorf("%w: %d deadlines for %d entries", ErrCorrupt, len(a.timers), a.tree.Len())
	}
	queued := make(map[timerKey]int64, len(a.heap))
	for i, e := range a.heap {
		if i > 0 && expiryLess(e, a.heap[(i-1)/2]) {
			return fmt.Errorf("%w: expiry heap out of order at %d", ErrCorrupt, i)
		}
		if tm, ok := a.timers[e.key()]; ok && tm.at == e.at {
			queued[e.key()] = e.at
		}
	}
	for k := range a.timers {
		if int(k.id) >= len(a.tree.ranks) || a.tree.ranks[k.id].blocks.get(k.ext) == 0 {
			return fmt.Errorf("%w: deadline for an entry not in the tree", ErrCorrupt)
		}
		if _, ok := queued[k]; !ok {
			return fmt.Errorf("%w: deadline with no heap entry", ErrCorrupt)
		}
	}
	return nil
}

func expiryLess(x, y expiry) bool {
	if x.at != y.at {
		return x.at < y.at
	}
	return x.depth > y.depth
}

func (a *Approx) push(e expiry) {
	a.heap = append(a.heap, e)
	i := len(a.heap) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !expiryLess(a.heap[i], a.heap[p]) {
			break
		}
		a.heap[i], a.heap[p] = a.heap[p], a.heap[i]
		i = p
	}
}

func (a *Approx) pop() expiry {
	top := a.heap[0]
	last := len(a.heap) - 1
	a.heap[0] = a.heap[last]
	a.heap = a.heap[:last]
	if last > 0 {
		a.down(0)
	}
	return top
}

func (a *Approx) down(i int) {
	n := len(a.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && expiryLess(a.heap[r], a.heap[l]) {
			m = r
		}
		if !expiryLess(a.heap[m], a.heap[i]) {
			return
		}
		a.heap[i], a.heap[m] = a.heap[m], a.heap[i]
		i = m
	}
}
