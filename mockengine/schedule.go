package mockengine

import (
	"github.com/kvrouter/kvrouter/kv"
)

// Schedule picks the next batch, vLLM-style: running requests first, in
// admission order (one token each when decoding, a chunk of their prompt
// when prefilling), then waiting requests in arrival order while the token
// budget, the sequence limit and the free blocks allow. A running request
// that needs a block when none is left preempts the most recently admitted
// request; after a preemption nothing new is admitted in that step. It
// returns nil when there is nothing to do. The batch's effects apply only
// when it is passed to Complete.
func (r *Rank) Schedule() (*Batch, error) {
	if r.inFlight != nil {
		return nil, ErrBatchInFlight
	}
	b := &Batch{rank: r}
	budget := r.cfg.MaxNumBatchedTokens
	preempted := false
	for i := 0; i < len(r.running) && budget > 0; i++ {
		s := r.running[i]
		n := min(len(s.tokens)-s.computed, budget)
		for !r.reserve(s, s.computed+n) {
			victim := r.running[len(r.running)-1]
			r.preempt(victim)
			preempted = true
			if victim == s {
				break
			}
		}
		if s.state != seqRunning {
			break // s preempted itself: it was the last running request
		}
		b.add(s, n)
		budget -= n
	}
	for !preempted && budget > 0 && len(r.waiting) > 0 && len(r.running) < r.cfg.MaxNumSeqs {
		s := r.waiting[0]
		if !r.admit(s) {
			break // first come, first served: later requests wait too
		}
		r.waiting = r.waiting[1:]
		r.running = append(r.running, s)
		n := min(len(s.tokens)-s.computed, budget)
		b.add(s, n)
		budget -= n
	}
	if len(b.items) == 0 {
		return nil, nil
	}
	b.Duration = r.cfg.stepDuration(b.PrefillTokens, b.DecodeSeqs, b.DecodeContext)
	r.inFlight = b
	return b, nil
}

func (b *Batch) add(s *sequence, n int) {
	b.items = append(b.items, batchItem{seq: s, tokens: n})
	if n == 1 && s.generated > 0 {
		b.DecodeSeqs++ // feeding back the last sampled token
		b.DecodeContext += len(s.tokens)
	} else {
		b.PrefillTokens += n
	}
}

// Complete applies a scheduled batch: computed tokens advance, newly full
// blocks enter the prefix cache (Stored events), requests whose known
// tokens are all computed sample their next token, and finished requests
// release their blocks. Requests aborted since Schedule are skipped.
func (r *Rank) Complete(b *Batch) ([]Output, error) {
	if b == nil || b != r.inFlight {
		return nil, ErrForeignBatch
	}
	r.inFlight = nil
	r.now += b.Duration
	var outs []Output
	finished := false
	for _, it := range b.items {
		s := it.seq
		if s.state != seqRunning {
			continue
		}
		s.computed += it.tokens
		r.storeFullBlocks(s)
		if s.computed < len(s.tokens) {
			continue // prefill continues next step
		}
		tok := nextToken(s.seed)
		s.seed = foldContext(s.seed, tok)
		s.tokens = append(s.tokens, tok)
		s.generated++
		r.stats.GenerationTokens++
		out := Output{
			RequestID: s.req.ID, Token: tok, Index: s.generated - 1,
			PromptTokens: len(s.req.Prompt), CachedTokens: s.cachedTokens,
			Arrived: s.arrived, At: r.now,
		}
		if s.generated >= s.req.MaxTokens {
			out.Finished = true
			r.finish(s)
			finished = true
		}
		outs = append(outs, out)
	}
	if finished {
		kept := r.running[:0]
		for _, s := range r.running {
			if s.state == seqRunning {
				kept = append(kept, s)
			}
		}
		clear(r.running[len(kept):])
		r.running = kept
	}
	return outs, nil
}

// admit looks the request's full blocks up in the prefix cache and
// reserves blocks for the rest of its known tokens. It changes nothing and
// returns false when the blocks are not there. At least one token is
// always computed, so a fully cached prompt recomputes its last block.
func (r *Rank) admit(s *sequence) bool {
	bs := r.cfg.BlockSize
	s.locals, s.hashes = chainedHashes(s.tokens, bs, s.locals, s.hashes)
	maxHit := (len(s.tokens) - 1) / bs
	var hits []*block
	idle := 0
	for i := 0; i < maxHit; i++ {
		b := r.pool.lookup(s.hashes[i])
		if b == nil {
			break
		}
		if b.refs == 0 {
			idle++ // on the LRU list: counted as available but about to be taken
		}
		hits = append(hits, b)
	}
	need := ceilDiv(len(s.tokens), bs) - len(hits)
	if r.pool.available()-idle < need {
		return false
	}
	for _, b := range hits {
		r.pool.acquire(b)
	}
	fresh, evicted := r.pool.allocate(need)
	r.emitRemoved(evicted)
	s.blocks = append(hits, fresh...)
	s.computed = len(hits) * bs
	s.stored = len(hits)
	s.state = seqRunning
	if !s.queried {
		s.queried = true
		s.cachedTokens = s.computed
		r.stats.PrefixQueries += uint64(len(s.req.Prompt))
		r.stats.PrefixHits += uint64(s.computed)
		r.stats.PromptTokens += uint64(len(s.req.Prompt))
	}
	return true
}

// reserve makes sure s has blocks for its first upto tokens.
func (r *Rank) reserve(s *sequence, upto int) bool {
	need := ceilDiv(upto, r.cfg.BlockSize) - len(s.blocks)
	if need <= 0 {
		return true
	}
	if r.pool.available() < need {
		return false
	}
	fresh, evicted := r.pool.allocate(need)
	r.emitRemoved(evicted)
	s.blocks = append(s.blocks, fresh...)
	return true
}

// preempt sends a running request back to the head of the queue. Its
// blocks are released (the full ones stay cached), and on readmission it
// recomputes prompt and generated tokens, mostly from the prefix cache.
func (r *Rank) preempt(s *sequence) {
	r.running = removeSeq(r.running, s)
	r.releaseBlocks(s)
	s.computed, s.stored = 0, 0
	s.state = seqWaiting
	r.waiting = append([]*sequence{s}, r.waiting...)
	r.stats.Preemptions++
}

func (r *Rank) finish(s *sequence) {
	r.releaseBlocks(s)
	s.state = seqDone
	delete(r.byID, s.req.ID)
	r.stats.FinishedRequests++
}

// releaseBlocks drops the request's references last block first, so a
// sequence's tail is evicted before its head: the cache never keeps a
// block whose parent it already evicted because of this request.
func (r *Rank) releaseBlocks(s *sequence) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		r.pool.release(s.blocks[i])
	}
	clear(s.blocks)
	s.blocks = s.blocks[:0]
}

// storeFullBlocks registers every newly full, computed block and emits one
// Stored event per run of blocks new to the cache.
func (r *Rank) storeFullBlocks(s *sequence) {
	bs := r.cfg.BlockSize
	full := s.computed / bs
	if full <= s.stored {
		return
	}
	s.locals, s.hashes = chainedHashes(s.tokens, bs, s.locals, s.hashes)
	runStart := -1
	flush := func(end int) {
		if runStart < 0 {
			return
		}
		ev := kv.Event{Kind: kv.EventStored, Blocks: make([]kv.StoredBlock, 0, end-runStart)}
		if runStart > 0 {
			ev.HasParent, ev.ParentHash = true, kv.ExternalBlockHash(s.hashes[runStart-1])
		}
		for i := runStart; i < end; i++ {
			ev.Blocks = append(ev.Blocks, kv.StoredBlock{
				BlockHash: kv.ExternalBlockHash(s.hashes[i]), TokensHash: s.locals[i],
			})
		}
		r.emitEvent(ev)
		runStart = -1
	}
	for i := s.stored; i < full; i++ {
		canonical, stored := r.pool.register(s.blocks[i], s.hashes[i], s.locals[i])
		s.blocks[i] = canonical
		if !stored {
			flush(i)
			continue
		}
		if runStart < 0 {
			runStart = i
		}
	}
	flush(full)
	s.stored = full
}

func (r *Rank) emitRemoved(hashes []kv.ExternalBlockHash) {
	if len(hashes) > 0 {
		r.emitEvent(kv.Event{Kind: kv.EventRemoved, Removed: hashes})
	}
}
