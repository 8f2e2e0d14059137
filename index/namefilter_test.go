package index

import (
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func TestNameFilter(t *testing.T) {
	consecutive := make([]kv.StoredBlock, 1000)
	for i := range consecutive {
		consecutive[i] = blk(uint64(i+1), uint64(i))
	}
	// A name that is not 1 and falls on 1's bit.
	shares := uint64(2)
	for filterSlot(kv.ExternalBlockHash(shares)) != filterSlot(1) {
		shares++
	}
	for _, tc := range []struct {
		name   string
		blocks []kv.StoredBlock
		want   bool
	}{
		{"no blocks", nil, true},
		{"one block", consecutive[:1], true},
		// Fibonacci hashing spreads consecutive ids (engines that number
		// their blocks) over distinct bits.
		{"1,000 consecutive ids", consecutive, true},
		{"a repeat at the end", append(consecutive[:100:100], consecutive[0]), false},
		{"a repeat next to its first", append(consecutive[:51:51], consecutive[50]), false},
		{"two names sharing a bit", []kv.StoredBlock{blk(1, 1), blk(shares, 2)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f nameFilter
			if got := f.distinct(tc.blocks); got != tc.want {
				t.Fatalf("distinct = %v, want %v", got, tc.want)
			}
			for w, bits := range f.bits {
				if bits != 0 {
					t.Fatalf("word %d left %#x set: the set must be empty between calls", w, bits)
				}
			}
		})
	}
}
