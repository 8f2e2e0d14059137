// Package mockengine simulates an LLM inference engine well enough for a
// KV-aware router to matter: a paged KV cache with prefix caching per
// data-parallel rank, a continuous-batching scheduler whose step time
// depends on the work in the step, and an OpenAI-style HTTP front end.
//
// # Model
//
// Each rank owns TotalKVBlocks blocks of BlockSize tokens. A block that
// holds a full, computed block of tokens is registered under its chained
// hash (hashing.SequenceHashes, the engine's block_hash; hashing.BlockHashes
// gives its tokens_hash), exactly as a router hashes the same tokens.
// Running requests hold references to their blocks; a block nobody
// references stays cached in least-recently-used order and is evicted only
// when a new block is needed. A request is admitted only when every block of
// its prompt can be reserved, so nothing is over-allocated; decode blocks
// are taken one at a time, and when none is left the most recently admitted
// running request is preempted (its blocks released, its progress
// recomputed later), as vLLM does.
//
// Output blocks are cached too, like vLLM: once generated tokens fill a
// block, that block is hashed over prompt+output and stored, so a follow-up
// turn that resends the conversation hits it.
//
// Each generated token id is a pure function of the whole context before it
// (prompt and tokens generated so far), so repeated prompts produce repeated
// outputs (greedy decoding), the output blocks are hashable by anyone who
// saw the tokens, and a prompt extended by a request's first k tokens
// continues with its token k+1 (a migrated stream yields the uninterrupted
// text).
//
// # Faults
//
// POST /fault (and the Server's setters) makes the worker unhealthy, adds
// phantom waiting requests, restarts or resets a rank, mutes KV events, or
// drops answers' connections as a killed engine does: all of them
// ("dead"), or each once it has generated n tokens ("drop_after_tokens").
//
// # Events
//
// The rank reports Stored events when the prefill chunk (or the decode
// step) that completes blocks finishes — consecutive new blocks of one
// request in one event, parented on the block before them — Removed events
// when blocks are evicted, and Cleared when the prefix cache is reset. Event
// ids count up from 0 per rank.
//
// # Time
//
// Rank is a deterministic state machine: Schedule picks the next batch and
// says how long it takes in model time; Complete applies it. Engine drives
// the ranks in real time, dividing every duration by Config.Speedup.
package mockengine
