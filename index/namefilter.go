package index

import "github.com/kvrouter/kvrouter/kv"

// nameFilter screens a long Stored event for an engine hash it names
// twice (checkSelfReference) with one bit per name in a 64 Kbit set
// before any exact check. An event names ~90 blocks on average in the
// Mooncake replay (block size 64), and putting each in a hash table to
// find the rare repeat took 14% of applying the event
// (BenchmarkApplyMooncakeSteady's profile). Distinct names almost always
// set distinct bits: for 100 names two share a bit in 7% of events, and
// only those events (and the ones that do repeat a name) pay for the
// exact check. Names an adversary chose to share bits cost that check,
// which is what every event cost before, and nothing more.
type nameFilter struct {
	// bits is allocated on the first long event (8 KB); it is all zero
	// between calls.
	bits *[filterBits / 64]uint64
}

const (
	filterLog  = 16
	filterBits = 1 << filterLog
)

// filterSlot spreads a name over the set (Fibonacci hashing: engines may
// name blocks by consecutive ids).
func filterSlot(h kv.ExternalBlockHash) uint64 {
	return uint64(h) * 0x9e3779b97f4a7c15 >> (64 - filterLog)
}

// distinct reports true when no two blocks share a bit, which proves
// their names distinct; false means they may repeat one.
func (f *nameFilter) distinct(blocks []kv.StoredBlock) bool {
	if f.bits == nil {
		f.bits = new([filterBits / 64]uint64)
	}
	set := len(blocks)
	for i, b := range blocks {
		s := filterSlot(b.BlockHash)
		w, bit := s/64, uint64(1)<<(s%64)
		if f.bits[w]&bit != 0 {
			set = i
			break
		}
		f.bits[w] |= bit
	}
	for _, b := range blocks[:set] {
		s := filterSlot(b.BlockHash)
		f.bits[s/64] &^= 1 << (s % 64)
	}
	return set == len(blocks)
}
