// Package hashing turns token ids into the block hashes the index is keyed
// by. It follows Dynamo's compute_block_hash_for_seq so that tokens_hash
// values published by Dynamo-style engines match prompts hashed here:
//
//	local[i] = xxh3_64(le_u32(tokens of block i) ‖ le_u64(sorted mm hashes), seed)
//	seed     = 1337, or 1337 + xxh3_64(lora_name, 0) (wrapping) for a LoRA
//	seq[0]   = local[0]
//	seq[i]   = xxh3_64(le_u64(seq[i-1]) ‖ le_u64(local[i]), 1337)
//
// Only full blocks are hashed: a trailing partial block is never cached by
// an engine, so it can never match.
//
// Compatibility: this is the layout of Dynamo's kv-router
// (ai-dynamo/dynamo lib/kv-router/src/protocols.rs, crate dynamo-kv-router;
// checked at commits cfa22544 and 038eab23) for requests without a
// cache_namespace and outside Eagle mode, neither of which is supported here.
// testdata/vectors.json holds vectors computed independently of this code
// (python3-xxhash, Dynamo's layout, Dynamo's published values); see
// dynamo_vectors_test.go for how to regenerate them.
package hashing

import (
	"encoding/binary"
	"slices"
	"unsafe"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/kv"
)

// Seed is Dynamo's XXH3_SEED, the base seed of every block hash.
const Seed uint64 = 1337

// Options changes what a block hash covers.
type Options struct {
	// LoraName salts every block hash: a LoRA adapter's KV cache is not
	// interchangeable with the base model's.
	LoraName string
	// ExtraKeys, when non-nil, holds per-block extra keys (multimodal
	// content hashes, Dynamo's block_mm_infos). Entry i belongs to block i;
	// a missing or empty entry means the block has none.
	ExtraKeys [][]uint64
}

// SaltedSeed returns the hash seed for a LoRA name ("" = base model).
func SaltedSeed(loraName string) uint64 {
	if loraName == "" {
		return Seed
	}
	return Seed + xxh3.HashString(loraName) // wrapping add, as Dynamo
}

// BlockCount is the number of full blocks in n tokens.
func BlockCount(n, blockSize int) int {
	if blockSize <= 0 {
		return 0
	}
	return n / blockSize
}

// BlockHashes returns the local hash of every full block of tokens.
func BlockHashes(tokens []uint32, blockSize int, opts Options) []kv.LocalBlockHash {
	return AppendBlockHashes(nil, tokens, blockSize, opts)
}

// AppendBlockHashes is BlockHashes appending to dst, so hot paths can reuse
// a buffer.
func AppendBlockHashes(dst []kv.LocalBlockHash, tokens []uint32, blockSize int, opts Options) []kv.LocalBlockHash {
	n := BlockCount(len(tokens), blockSize)
	if n == 0 {
		return dst
	}
	seed := SaltedSeed(opts.LoraName)
	dst = slices.Grow(dst, n)
	var buf []byte
	for i := 0; i < n; i++ {
		block := tokens[i*blockSize : (i+1)*blockSize]
		if littleEndian && (i >= len(opts.ExtraKeys) || len(opts.ExtraKeys[i]) == 0) {
			// The block's bytes in memory are already its little-endian
			// encoding: hash them in place instead of copying them out.
			dst = append(dst, kv.LocalBlockHash(xxh3Seeded(tokenBytes(block), seed)))
			continue
		}
		if buf == nil {
			buf = make([]byte, 0, blockSize*4+64)
		}
		buf = buf[:0]
		for _, t := range block {
			buf = binary.LittleEndian.AppendUint32(buf, t)
		}
		if i < len(opts.ExtraKeys) && len(opts.ExtraKeys[i]) > 0 {
			keys := slices.Clone(opts.ExtraKeys[i])
			slices.Sort(keys)
			for _, k := range keys {
				buf = binary.LittleEndian.AppendUint64(buf, k)
			}
		}
		dst = append(dst, kv.LocalBlockHash(xxh3Seeded(buf, seed)))
	}
	return dst
}

// littleEndian reports whether this machine stores a uint32 least
// significant byte first, the byte order Dynamo's hash covers.
var littleEndian = func() bool {
	x := uint32(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// tokenBytes is the memory of tokens viewed as bytes, without a copy; only
// read, and only while tokens is alive.
func tokenBytes(tokens []uint32) []byte {
	if len(tokens) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), len(tokens)*4)
}

// SequenceHashes chains local hashes so that each entry identifies the whole
// prefix up to and including its block.
func SequenceHashes(local []kv.LocalBlockHash) []kv.SequenceHash {
	if len(local) == 0 {
		return nil
	}
	return AppendSequenceHashes(make([]kv.SequenceHash, 0, len(local)), local)
}

// AppendSequenceHashes is SequenceHashes appending to dst.
func AppendSequenceHashes(dst []kv.SequenceHash, local []kv.LocalBlockHash) []kv.SequenceHash {
	if len(local) == 0 {
		return dst
	}
	dst = slices.Grow(dst, len(local))
	prev := kv.SequenceHash(local[0])
	dst = append(dst, prev)
	for _, h := range local[1:] {
		// xxh3_64(le_u64(prev) ‖ le_u64(h), Seed)
		prev = kv.SequenceHash(xxh3Hash16(uint64(prev), uint64(h), Seed))
		dst = append(dst, prev)
	}
	return dst
}
