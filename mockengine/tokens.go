package mockengine

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// VocabSize bounds generated token ids, like a small tokenizer vocabulary.
const VocabSize = 32000

// outputSeed fingerprints a prompt; generated tokens derive from it so
// that the same prompt always yields the same completion.
func outputSeed(prompt []uint32) uint64 {
	buf := make([]byte, 0, 4*len(prompt))
	for _, t := range prompt {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	return xxh3.Hash(buf)
}

// GeneratedToken is the i-th token (from 0) the engine generates for a
// prompt with the given seed. It is exported so tests and tools can
// predict a completion without running the engine.
func GeneratedToken(seed uint64, i int) uint32 {
	// splitmix64: a cheap, well-mixed function of seed and position.
	z := seed + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return uint32(z % VocabSize)
}

// GeneratedTokens returns the first n tokens the engine generates for
// prompt.
func GeneratedTokens(prompt []uint32, n int) []uint32 {
	seed := outputSeed(prompt)
	out := make([]uint32, n)
	for i := range out {
		out[i] = GeneratedToken(seed, i)
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
