package mockengine

import (
	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// VocabSize bounds generated token ids, like a small tokenizer vocabulary.
const VocabSize = 32000

// The mock generates text like a language model does in one respect
// that matters to a router: the next token is a function of the whole
// context so far (prompt and tokens generated). So a request whose
// prompt is another's prompt plus its first k generated tokens continues
// with that request's token k+1 onwards: a migrated stream, continued
// on another engine, produces exactly the uninterrupted text.

// outputSeed is the generator's state after reading prompt.
func outputSeed(prompt []uint32) uint64 {
	return foldContext(0x243f6a8885a308d3, prompt...)
}

// foldContext advances the generator's state by tokens of context.
func foldContext(state uint64, tokens ...uint32) uint64 {
	for _, t := range tokens {
		state = mix64(state ^ (uint64(t)+1)*0x9e3779b97f4a7c15)
	}
	return state
}

// nextToken is the token the engine generates in state.
func nextToken(state uint64) uint32 { return GeneratedToken(state, 0) }

// GeneratedToken is a well-mixed pseudo-random token id drawn from seed
// and position i.
func GeneratedToken(seed uint64, i int) uint32 {
	return uint32(mix64(seed+uint64(i+1)*0x9e3779b97f4a7c15) % VocabSize)
}

// mix64 is splitmix64's finalizer.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// GeneratedTokens returns the first n tokens the engine generates for
// prompt.
func GeneratedTokens(prompt []uint32, n int) []uint32 {
	state := outputSeed(prompt)
	out := make([]uint32, n)
	for i := range out {
		out[i] = nextToken(state)
		state = foldContext(state, out[i])
	}
	return out
}

// chainedHashes extends (locals, seqs) to cover every full block of
// tokens. Extending one block at a time reuses the previous sequence hash,
// so growing a long sequence stays linear.
func chainedHashes(tokens []uint32, blockSize int, locals []kv.LocalBlockHash, seqs []kv.SequenceHash) ([]kv.LocalBlockHash, []kv.SequenceHash) {
	full := len(tokens) / blockSize
	if len(seqs) >= full {
		return locals, seqs
	}
	start := len(seqs)
	locals = hashing.AppendBlockHashes(locals, tokens[start*blockSize:full*blockSize], blockSize, hashing.Options{})
	if start == 0 {
		return locals, hashing.SequenceHashes(locals)
	}
	// SequenceHashes of (previous sequence hash, next local hash) is the
	// recurrence seq[i] = H(seq[i-1] ‖ local[i]), because seq[0] is taken
	// as-is.
	pair := make([]kv.LocalBlockHash, 2)
	for i := start; i < full; i++ {
		pair[0], pair[1] = kv.LocalBlockHash(seqs[i-1]), locals[i]
		seqs = append(seqs, hashing.SequenceHashes(pair)[1])
	}
	return locals, seqs
}
