package mockengine

import (
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// KV transfer between a prefill-role and a decode-role engine (vLLM's
// disaggregated serving with a KV connector such as NIXL), simulated:
//
//   - the prefill engine computes the prompt (max_tokens 1), then holds
//     the prompt's full blocks (Rank.Hold: referenced, so not evicted)
//     until the decode side has pulled them or the hold expires, and
//     answers kv_transfer_params naming them;
//   - the decode engine charges the transfer time of the blocks it does
//     not already cache (bytes = blocks × block size × KV bytes per
//     token, over Config.KVTransferGbps), takes them into its own cache
//     (Rank.Import: Stored events, so the router learns the decode
//     worker now holds the prompt) and decodes, computing only the
//     prompt's last partial block.

// Hold references the prompt's leading full blocks that rank has cached
// (stopping at the first one it has not) and returns their ids; the
// blocks stay until Release.
func (r *Rank) Hold(prompt []uint32) (held []*block) {
	_, hashes := chainedHashes(prompt, r.cfg.BlockSize, nil, nil)
	for _, h := range hashes {
		b := r.pool.lookup(h)
		if b == nil {
			break
		}
		r.pool.acquire(b)
		held = append(held, b)
	}
	return held
}

// Release drops the references of a Hold (last block first, as a
// finished request does).
func (r *Rank) Release(held []*block) {
	for i := len(held) - 1; i >= 0; i-- {
		r.pool.release(held[i])
	}
}

// Import puts the prompt's first n full blocks into the cache as if
// computed here (they arrived by KV transfer): blocks already cached are
// kept, the others take free or evicted blocks and are announced in one
// Stored event per run. It stops when the cache has no block to give and
// returns how many of the n blocks are cached afterwards, and how many of
// them it had to bring in (the transferred ones).
func (r *Rank) Import(prompt []uint32, n int) (cached, imported int) {
	locals, hashes := chainedHashes(prompt, r.cfg.BlockSize, nil, nil)
	n = min(n, len(hashes))
	var run []kv.StoredBlock
	runStart := -1
	flush := func() {
		if len(run) == 0 {
			return
		}
		ev := kv.Event{Kind: kv.EventStored, Blocks: run}
		if runStart > 0 {
			ev.HasParent, ev.ParentHash = true, kv.ExternalBlockHash(hashes[runStart-1])
		}
		r.emitEvent(ev)
		run, runStart = nil, -1
	}
	var taken []*block
	for i := 0; i < n; i++ {
		if b := r.pool.lookup(hashes[i]); b != nil {
			flush()
			r.pool.acquire(b) // keep it while the rest is brought in
			taken = append(taken, b)
			cached++
			continue
		}
		if r.pool.available() <= 0 {
			break
		}
		fresh, evicted := r.pool.allocate(1)
		r.emitRemoved(evicted)
		b, _ := r.pool.register(fresh[0], hashes[i], locals[i])
		taken = append(taken, b)
		if runStart < 0 {
			runStart = i
		}
		run = append(run, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(hashes[i]), TokensHash: locals[i]})
		cached++
		imported++
	}
	flush()
	for i := len(taken) - 1; i >= 0; i-- {
		r.pool.release(taken[i])
	}
	return cached, imported
}

// TransferTime is the model time to move blocks KV blocks at the
// configured bandwidth (0 when either the bandwidth or the bytes per
// token are unknown).
func (c Config) TransferTime(blocks int) time.Duration {
	if c.KVTransferGbps <= 0 || c.KVBytesPerToken <= 0 || blocks <= 0 {
		return 0
	}
	bits := float64(blocks) * float64(c.BlockSize) * c.KVBytesPerToken * 8
	return time.Duration(bits / (c.KVTransferGbps * 1e9) * float64(time.Second))
}

// HoldPrefix holds the prompt's cached full blocks on a rank (see
// Rank.Hold) and returns their ids and a release function (idempotent).
func (e *Engine) HoldPrefix(dpRank int, prompt []uint32) (ids []uint32, release func(), err error) {
	if dpRank < 0 || dpRank >= len(e.ranks) {
		return nil, nil, fmt.Errorf("%w: %d, the engine has %d", ErrBadDpRank, dpRank, len(e.ranks))
	}
	rr := e.ranks[dpRank]
	rr.mu.Lock()
	held := rr.rank.Hold(prompt)
	rr.mu.Unlock()
	ids = make([]uint32, len(held))
	for i, b := range held {
		ids[i] = b.id
	}
	done := false
	return ids, func() {
		rr.mu.Lock()
		defer rr.mu.Unlock()
		if !done {
			done = true
			rr.rank.Release(held)
		}
	}, nil
}

// ImportPrefix brings the prompt's first n full blocks into a rank's
// cache (Rank.Import), on dpRank or, when negative, the least loaded
// rank; it returns the rank and how many blocks were transferred.
func (e *Engine) ImportPrefix(dpRank int, prompt []uint32, n int) (rank, imported int, err error) {
	if dpRank >= len(e.ranks) {
		return 0, 0, fmt.Errorf("%w: %d, the engine has %d", ErrBadDpRank, dpRank, len(e.ranks))
	}
	if dpRank < 0 {
		dpRank = e.leastLoaded()
	}
	rr := e.ranks[dpRank]
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.stopped {
		return dpRank, 0, ErrStopped
	}
	_, imported = rr.rank.Import(prompt, n)
	return dpRank, imported, nil
}

// MissingBlocks is how many of the prompt's first n full blocks a rank
// does not cache: what a transfer has to move.
func (e *Engine) MissingBlocks(dpRank int, prompt []uint32, n int) int {
	if dpRank < 0 || dpRank >= len(e.ranks) {
		return n
	}
	rr := e.ranks[dpRank]
	rr.mu.Lock()
	defer rr.mu.Unlock()
	_, hashes := chainedHashes(prompt, rr.rank.cfg.BlockSize, nil, nil)
	missing := 0
	for i := 0; i < min(n, len(hashes)); i++ {
		if rr.rank.pool.lookup(hashes[i]) == nil {
			missing++
		}
	}
	return missing
}
