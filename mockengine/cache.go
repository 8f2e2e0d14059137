package mockengine

import (
	"container/list"
	"errors"

	"github.com/kvrouter/kvrouter/kv"
)

// block is one KV block of a rank. A block is in exactly one of three
// states: referenced by running requests (refs > 0, counted in used),
// cached but unreferenced (on the LRU list, evictable), or free (not
// represented at all: the pool only counts free capacity).
type block struct {
	// id names the block in KV transfers (vLLM's block ids): unique per
	// rank while the block lives.
	id     uint32
	hash   kv.SequenceHash
	local  kv.LocalBlockHash
	cached bool // registered under hash in the pool
	refs   int
	lru    *list.Element
}

// blockPool is the paged KV cache of one rank with prefix caching.
type blockPool struct {
	total  int
	used   int // blocks with refs > 0
	byHash map[kv.SequenceHash]*block
	lru    *list.List // of *block, least recently released first
	nextID uint32
}

// ErrCacheInUse is returned when the prefix cache is reset while requests
// still hold blocks (vLLM refuses the same).
var ErrCacheInUse = errors.New("prefix cache is in use by running requests")

func newBlockPool(total int) *blockPool {
	return &blockPool{total: total, byHash: make(map[kv.SequenceHash]*block), lru: list.New()}
}

// available is the number of blocks a request could still take: free ones
// plus cached ones nobody references.
func (p *blockPool) available() int { return p.total - p.used }

// cachedBlocks is the number of blocks registered in the prefix cache.
func (p *blockPool) cachedBlocks() int { return len(p.byHash) }

// lookup returns the cached block with that hash, or nil.
func (p *blockPool) lookup(h kv.SequenceHash) *block { return p.byHash[h] }

// acquire adds a reference to a cached block, taking it off the LRU list.
func (p *blockPool) acquire(b *block) {
	if b.refs == 0 {
		if b.lru != nil {
			p.lru.Remove(b.lru)
			b.lru = nil
		}
		p.used++
	}
	b.refs++
}

// allocate takes n new private blocks, evicting least recently used
// cached blocks once the free ones run out. It returns the engine hashes
// of the evicted blocks. The caller must have checked available().
func (p *blockPool) allocate(n int) (blocks []*block, evicted []kv.ExternalBlockHash) {
	blocks = make([]*block, n)
	for i := range blocks {
		if p.total-p.used-p.lru.Len() == 0 {
			victim := p.lru.Remove(p.lru.Front()).(*block)
			victim.lru, victim.cached = nil, false
			delete(p.byHash, victim.hash)
			evicted = append(evicted, kv.ExternalBlockHash(victim.hash))
		}
		p.nextID++
		blocks[i] = &block{id: p.nextID, refs: 1}
		p.used++
	}
	return blocks, evicted
}

// release drops one reference. A cached block nobody references becomes
// the most recently used evictable block; an uncached one is freed.
func (p *blockPool) release(b *block) {
	b.refs--
	if b.refs > 0 {
		return
	}
	p.used--
	if b.cached {
		b.lru = p.lru.PushBack(b)
	}
}

// register caches a private block that now holds a full computed block.
// When another request already cached the same hash, the private copy is
// dropped and the caller gets the cached block (with a reference) instead:
// the cache holds each prefix once. stored says whether the block is new
// to the cache, i.e. worth a Stored event.
func (p *blockPool) register(b *block, h kv.SequenceHash, local kv.LocalBlockHash) (canonical *block, stored bool) {
	if existing := p.byHash[h]; existing != nil && existing != b {
		p.acquire(existing)
		p.release(b)
		return existing, false
	}
	b.hash, b.local, b.cached = h, local, true
	p.byHash[h] = b
	return b, true
}

// clear forgets every cached block. It refuses while blocks are
// referenced, because running requests would keep blocks the router was
// told are gone.
func (p *blockPool) clear() error {
	if p.used > 0 {
		return ErrCacheInUse
	}
	for _, b := range p.byHash {
		b.cached, b.lru = false, nil
	}
	clear(p.byHash)
	p.lru.Init()
	return nil
}
