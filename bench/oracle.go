package bench

import (
	"container/list"
	"fmt"
	"math"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// Three upper bounds on the prefix hit rate a router can reach on a
// schedule, from loosest to tightest:
//
//   - oracle_unbounded (OracleHitRate): perfect placement on engines with
//     infinite cache and instant prefill. No router reaches it on a fleet
//     whose caches evict.
//   - oracle_capacity (OracleCapacityHitRate): the fleet's real ranks,
//     each with its cache size and LRU eviction. Each request goes to the
//     best rank with hindsight of the caches' state (not of future
//     requests): the one where it gains the most hit blocks net of the
//     recently used blocks it would evict there (blocks a pooled LRU over
//     the whole fleet would keep). A prefix is kept on one rank, never
//     copied for load. (Greedy on hits alone is no bound: on Mooncake one
//     shared 512-token head pulls every request onto one rank and its
//     cache thrashes, 0.039 against 0.085 with the eviction term and
//     0.088 for one LRU over the fleet's pooled capacity.)
//   - oracle_timed (OracleTimedHitRate): additionally, a block counts only
//     once the prefill that stores it has reached it, at the engine's
//     idle prefill speed: a request arriving while its prefix is still
//     being computed elsewhere cannot hit it (the engine registers a
//     block when the step that computed it completes, as vLLM does).
//
// The last two count hits as the engine does: only full blocks, and never
// the prompt's last token (at most (len−1)/block_size blocks), so they
// compare with the engines' reported cached tokens. They are greedy
// placements, not exhaustive searches, so a router can in principle land
// above them (e.g. a request that waits in a queue until its prefix is
// ready hits blocks oracle_timed counts as misses); the routing goal is
// measured against oracle_timed.

// OracleHitRate is the prefix hit rate of a router with perfect placement
// over engines with infinite cache: a prompt block counts as a hit when
// its whole prefix chain (its sequence hash) appeared in an earlier
// request. Requests are taken in arrival order. It is an upper bound for
// every real policy, which also loses blocks to eviction and splits
// prefixes across workers.
func OracleHitRate(reqs []Request, blockSize int) (float64, error) {
	return oracleUnbounded(reqs, blockSize, 0)
}

func oracleUnbounded(reqs []Request, blockSize, warmup int) (float64, error) {
	if blockSize <= 0 {
		return 0, fmt.Errorf("%w: block size must be > 0, got %d", ErrBadWorkload, blockSize)
	}
	seen := make(map[kv.SequenceHash]struct{})
	var hit, total int
	for i, r := range reqs {
		seqs := hashing.SequenceHashes(hashing.BlockHashes(r.Tokens, blockSize, hashing.Options{}))
		if i >= warmup {
			total += len(r.Tokens)
			for _, s := range seqs {
				if _, ok := seen[s]; !ok {
					break // a chain miss: later blocks have an unseen prefix
				}
				hit += blockSize
			}
		}
		for _, s := range seqs {
			seen[s] = struct{}{}
		}
	}
	if total == 0 {
		return 0, nil
	}
	return float64(hit) / float64(total), nil
}

// OracleFleet is what the capacity- and time-bounded oracles know of the
// fleet: its cache-owning ranks and how fast an idle engine prefills.
type OracleFleet struct {
	// Ranks is the number of KV caches: workers × data-parallel ranks.
	Ranks int
	// BlockSize is the engines' (and the router's) block size in tokens.
	BlockSize int
	// CacheBlocks is each rank's cache capacity in blocks.
	CacheBlocks int
	// PrefillTokensPerSec, StepBaseTime and MaxBatchedTokens are the
	// engine's prefill timing in model time (mockengine.Config): a step
	// computes up to MaxBatchedTokens prompt tokens and lasts
	// StepBaseTime + tokens/PrefillTokensPerSec. Only oracle_timed uses
	// them.
	PrefillTokensPerSec float64
	StepBaseTime        time.Duration
	MaxBatchedTokens    int
	// Speedup maps model time onto the schedule's clock: an engine
	// running Speedup times faster than real time finishes a prefill of
	// model duration d after d/Speedup of arrival time.
	Speedup float64
}

// Validate rejects a fleet the oracles cannot simulate.
func (f OracleFleet) Validate() error {
	switch {
	case f.Ranks <= 0 || f.BlockSize <= 0 || f.CacheBlocks <= 0:
		return fmt.Errorf("%w: oracle fleet needs ranks, block size and cache blocks > 0, got %d, %d, %d",
			ErrBadWorkload, f.Ranks, f.BlockSize, f.CacheBlocks)
	case !(f.PrefillTokensPerSec > 0) || math.IsInf(f.PrefillTokensPerSec, 0) || f.StepBaseTime < 0 ||
		f.MaxBatchedTokens <= 0 || !(f.Speedup > 0) || math.IsInf(f.Speedup, 0):
		return fmt.Errorf("%w: oracle fleet timing: prefill %v tok/s, step base %v, batch %d tokens, speedup %v",
			ErrBadWorkload, f.PrefillTokensPerSec, f.StepBaseTime, f.MaxBatchedTokens, f.Speedup)
	}
	return nil
}

// Bounds are the three hit-rate bounds of one schedule on one fleet and
// its TTFT p90 floor.
type Bounds struct {
	Unbounded float64 `json:"oracle_unbounded"`
	Capacity  float64 `json:"oracle_capacity"`
	Timed     float64 `json:"oracle_timed"`
	// TTFTFloorP90 (ms) is the p90 over the measured requests of each
	// prompt's uncached prefill on an idle engine (TTFTFloorP90): what p90
	// TTFT would be with no queueing and no cache hits. 0 when the fleet's
	// timing is not described.
	TTFTFloorP90 float64 `json:"ttft_p90_floor_ms,omitempty"`
}

// OracleBounds computes all three bounds.
func OracleBounds(reqs []Request, f OracleFleet) (Bounds, error) {
	return OracleBoundsAfter(reqs, f, 0)
}

// OracleBoundsAfter computes all three bounds over the requests after the
// first warmup: those still fill the caches but are not counted, as a
// sweep leaves its warm-up requests out of the policies' figures.
func OracleBoundsAfter(reqs []Request, f OracleFleet, warmup int) (Bounds, error) {
	if warmup < 0 || warmup > len(reqs) {
		return Bounds{}, fmt.Errorf("%w: warm-up of %d requests in a schedule of %d", ErrBadWorkload, warmup, len(reqs))
	}
	var b Bounds
	var err error
	if b.Unbounded, err = oracleUnbounded(reqs, f.BlockSize, warmup); err != nil {
		return Bounds{}, err
	}
	if b.Capacity, err = oracleSimulate(reqs, f, false, warmup); err != nil {
		return Bounds{}, err
	}
	if b.Timed, err = oracleSimulate(reqs, f, true, warmup); err != nil {
		return Bounds{}, err
	}
	return b, nil
}

// OracleCapacityHitRate is oracle_capacity: per-rank LRU caches of the
// fleet's size; each request is placed on the rank maximising its hit
// blocks minus the blocks it would evict there that were used more
// recently than the oldest block any rank would give up (ties: the rank
// with more free blocks, then the staler one). Requests are taken in
// order (a schedule is sorted by arrival).
func OracleCapacityHitRate(reqs []Request, f OracleFleet) (float64, error) {
	return oracleSimulate(reqs, f, false, 0)
}

// OracleTimedHitRate is oracle_timed: oracle_capacity where a cached block
// only counts once the idle-speed prefill that stores it reached it.
func OracleTimedHitRate(reqs []Request, f OracleFleet) (float64, error) {
	return oracleSimulate(reqs, f, true, 0)
}

func oracleSimulate(reqs []Request, f OracleFleet, timed bool, warmup int) (float64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	ranks := make([]*oracleCache, f.Ranks)
	for i := range ranks {
		ranks[i] = newOracleCache(f.CacheBlocks)
	}
	var hit, total int
	var ready []time.Duration
	for i, r := range reqs {
		seqs := hashing.SequenceHashes(hashing.BlockHashes(r.Tokens, f.BlockSize, hashing.Options{}))
		maxHit := min(len(seqs), max(len(r.Tokens)-1, 0)/f.BlockSize)
		now := r.Arrival
		if !timed {
			now = time.Duration(math.MaxInt64) // every stored block is ready
		}
		// The oldest block any rank would give up: a pooled LRU would
		// evict that first.
		oldest := time.Duration(math.MaxInt64)
		for _, c := range ranks {
			if c.lru.Len() < c.capacity {
				oldest = -1 << 62
				break
			}
			oldest = min(oldest, c.lru.Front().Value.(*oracleBlock).lastUsed)
		}
		best, bestMatch, bestScore := 0, -1, math.MinInt
		for i, c := range ranks {
			m := c.match(seqs[:maxHit], now)
			score := m - c.youngEvictions(len(seqs)-m, oldest)
			if score > bestScore || (score == bestScore && c.roomier(ranks[best])) {
				best, bestMatch, bestScore = i, m, score
			}
		}
		if i >= warmup {
			hit += bestMatch * f.BlockSize
			total += len(r.Tokens)
		}
		ready = f.readyTimes(ready[:0], r.Arrival, len(r.Tokens), bestMatch, len(seqs), timed)
		ranks[best].store(seqs, bestMatch, ready, r.Arrival)
	}
	if total == 0 {
		return 0, nil
	}
	return float64(hit) / float64(total), nil
}

// readyTimes fills, for each full block from cached on, when the engine
// has computed it: an idle engine starts at arrival and runs steps of up
// to MaxBatchedTokens prompt tokens; a block is ready when the step that
// completes it ends. Untimed, every block is ready at arrival.
func (f OracleFleet) readyTimes(dst []time.Duration, arrival time.Duration, tokens, cached, blocks int, timed bool) []time.Duration {
	if !timed {
		for range blocks - cached {
			dst = append(dst, arrival)
		}
		return dst
	}
	done := cached * f.BlockSize // tokens computed so far
	var elapsed time.Duration    // model time since arrival
	for b := cached; b < blocks; b++ {
		for done < (b+1)*f.BlockSize {
			n := min(f.MaxBatchedTokens, tokens-done)
			elapsed += f.StepBaseTime + time.Duration(float64(n)/f.PrefillTokensPerSec*float64(time.Second))
			done += n
		}
		dst = append(dst, arrival+time.Duration(float64(elapsed)/f.Speedup))
	}
	return dst
}

// oracleCache is one rank's prefix cache: sequence hashes in LRU order,
// each with the time it becomes usable.
type oracleCache struct {
	capacity int
	blocks   map[kv.SequenceHash]*list.Element
	lru      *list.List // of *oracleBlock; front = least recently used
}

type oracleBlock struct {
	hash     kv.SequenceHash
	ready    time.Duration
	lastUsed time.Duration
}

func newOracleCache(capacity int) *oracleCache {
	return &oracleCache{capacity: capacity, blocks: make(map[kv.SequenceHash]*list.Element), lru: list.New()}
}

// match counts the leading blocks of seqs that are cached and ready at now.
func (c *oracleCache) match(seqs []kv.SequenceHash, now time.Duration) int {
	for i, h := range seqs {
		e, ok := c.blocks[h]
		if !ok || e.Value.(*oracleBlock).ready > now {
			return i
		}
	}
	return len(seqs)
}

// youngEvictions counts the blocks storing n new ones would evict that
// were used after oldest.
func (c *oracleCache) youngEvictions(n int, oldest time.Duration) int {
	evict := n - (c.capacity - c.lru.Len())
	young := 0
	for e := c.lru.Front(); e != nil && evict > 0; e = e.Next() {
		if e.Value.(*oracleBlock).lastUsed > oldest {
			young++
		}
		evict--
	}
	return young
}

// roomier reports whether c loses less than o by taking a request that
// hits neither better: more free blocks, then an older least recently
// used block (what it would evict is staler).
func (c *oracleCache) roomier(o *oracleCache) bool {
	cf, of := c.capacity-c.lru.Len(), o.capacity-o.lru.Len()
	if cf != of {
		return cf > of
	}
	if c.lru.Len() == 0 || o.lru.Len() == 0 {
		return false
	}
	return c.lru.Front().Value.(*oracleBlock).lastUsed < o.lru.Front().Value.(*oracleBlock).lastUsed
}

// store records a request's blocks: the first cached ones were hits, the
// rest become ready at ready[i-cached] (a block already there keeps the
// earlier of its two ready times). Blocks are touched last to first, so
// the prompt's head is the most recently used, as an engine that frees a
// finished request's blocks tail first leaves them; the least recently
// used blocks are evicted past capacity.
func (c *oracleCache) store(seqs []kv.SequenceHash, cached int, ready []time.Duration, now time.Duration) {
	for i := len(seqs) - 1; i >= 0; i-- {
		at := now
		if i >= cached {
			at = ready[i-cached]
		}
		if e, ok := c.blocks[seqs[i]]; ok {
			b := e.Value.(*oracleBlock)
			b.ready = min(b.ready, at)
			b.lastUsed = now
			c.lru.MoveToBack(e)
			continue
		}
		c.blocks[seqs[i]] = c.lru.PushBack(&oracleBlock{hash: seqs[i], ready: at, lastUsed: now})
		if c.lru.Len() > c.capacity {
			victim := c.lru.Remove(c.lru.Front()).(*oracleBlock)
			delete(c.blocks, victim.hash)
		}
	}
}
