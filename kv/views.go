package kv

import "unsafe"

// AsLocalHashes views a message's []uint64 as local block hashes without
// copying: LocalBlockHash is a uint64, so the memory is the same. The
// result aliases h, so it is only for slices nobody modifies afterwards
// (decoded messages, a decision's hashes once computed). A decision's
// hashes crossed two copies before (scheduler → ScoreRequest → every
// shard), 15% of the bytes a query-only decision allocated.
func AsLocalHashes(h []uint64) []LocalBlockHash {
	if len(h) == 0 {
		return nil
	}
	return unsafe.Slice((*LocalBlockHash)(unsafe.Pointer(&h[0])), len(h))
}

// LocalHashesAsUint64 is AsLocalHashes the other way, with the same rule.
func LocalHashesAsUint64(h []LocalBlockHash) []uint64 {
	if len(h) == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&h[0])), len(h))
}

// AsSequenceHashes views a message's []uint64 as sequence hashes without
// copying, with AsLocalHashes's rule: for slices nobody modifies afterwards.
// A rank keeps an added request's sampled hashes until it frees the request;
// an add message is never mutated once sent, so the rank keeps the
// message's own slice.
func AsSequenceHashes(h []uint64) []SequenceHash {
	if len(h) == 0 {
		return nil
	}
	return unsafe.Slice((*SequenceHash)(unsafe.Pointer(&h[0])), len(h))
}
