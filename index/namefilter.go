package index

import "github.com/kvrouter/kvrouter/kv"

// nameFilter narrows the search for an engine hash a long Stored event
// names twice (checkSelfReference) to the names that share a bit with
// another in a 64 Kbit set. An event names ~90 blocks on average in the
// Mooncake replay (block size 64) and some name thousands; putting every
// name in a hash table to find the rare repeat took 14% of applying an
// event (BenchmarkApplyMooncakeSteady's profile), mostly in growing the
// table for the long events. Distinct names almost always set distinct
// bits: for 100 names two share one in 7% of events, and then those two
// are what is compared. Names an adversary chose to share bits all end
// up compared by the exact check, which is what every name cost before.
type nameFilter struct {
	// once and twice are allocated on the first long event (8 KB each):
	// a name's bit in once, and in twice when a second name has it. Both
	// are all zero between calls.
	once, twice *[filterBits / 64]uint64
	sharing     []kv.ExternalBlockHash
}

const (
	filterLog  = 16
	filterBits = 1 << filterLog
)

// filterSlot spreads a name over the set (Fibonacci hashing: engines may
// name blocks by consecutive ids).
func filterSlot(h kv.ExternalBlockHash) (word uint64, bit uint64) {
	s := uint64(h) * 0x9e3779b97f4a7c15 >> (64 - filterLog)
	return s / 64, 1 << (s % 64)
}

// sharingNames returns the names of blocks whose bit another block's name
// has too, in order: every name blocks repeats is among them. The slice
// is reused by the next call.
func (f *nameFilter) sharingNames(blocks []kv.StoredBlock) []kv.ExternalBlockHash {
	if f.once == nil {
		f.once, f.twice = new([filterBits / 64]uint64), new([filterBits / 64]uint64)
	}
	shared := false
	for _, b := range blocks {
		w, bit := filterSlot(b.BlockHash)
		if f.once[w]&bit != 0 {
			f.twice[w] |= bit
			shared = true
		}
		f.once[w] |= bit
	}
	f.sharing = f.sharing[:0]
	for _, b := range blocks {
		w, bit := filterSlot(b.BlockHash)
		f.once[w] &^= bit
		if shared && f.twice[w]&bit != 0 {
			f.sharing = append(f.sharing, b.BlockHash)
		}
	}
	if shared {
		for _, h := range f.sharing {
			w, bit := filterSlot(h)
			f.twice[w] &^= bit
		}
	}
	return f.sharing
}
