package index

import (
	"slices"
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
	for w, bit := filterSlot(1); ; shares++ {
		if w2, bit2 := filterSlot(kv.ExternalBlockHash(shares)); w2 == w && bit2 == bit {
			break
		}
	}
	names := func(hs ...uint64) []kv.ExternalBlockHash {
		out := []kv.ExternalBlockHash{}
		for _, h := range hs {
			out = append(out, kv.ExternalBlockHash(h))
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		blocks []kv.StoredBlock
		want   []kv.ExternalBlockHash
	}{
		{"no blocks", nil, names()},
		{"one block", consecutive[:1], names()},
		// Fibonacci hashing spreads consecutive ids (engines that number
		// their blocks) over distinct bits.
		{"1,000 consecutive ids", consecutive, names()},
		{"a repeat at the end", append(consecutive[:100:100], consecutive[0]), names(1, 1)},
		{"a repeat next to its first", append(consecutive[:51:51], consecutive[50]), names(51, 51)},
		{"a name three times", append(consecutive[:3:3], consecutive[1], consecutive[1]), names(2, 2, 2)},
		{"two names sharing a bit", append(consecutive[:40:40], blk(shares, 2)), names(1, shares)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f nameFilter
			if got := f.sharingNames(tc.blocks); !slices.Equal(got, tc.want) {
				t.Fatalf("sharing %v, want %v", got, tc.want)
			}
			for w := range f.once {
				if f.once[w] != 0 || f.twice[w] != 0 {
					t.Fatalf("word %d left set (%#x, %#x): both sets must be empty between calls", w, f.once[w], f.twice[w])
				}
			}
		})
	}
}

// TestLongChainOfSharedBits has more than 32 names on one bit of the
// filter, so checkSelfReference falls through to its exact set: a chain
// of them is stored, the same chain with a repeat is rejected whole, and
// the set is empty for the next event.
func TestLongChainOfSharedBits(t *testing.T) {
	w0, bit0 := filterSlot(1)
	var chain []kv.StoredBlock
	for h := uint64(1); len(chain) < 40; h++ {
		if w, bit := filterSlot(kv.ExternalBlockHash(h)); w == w0 && bit == bit0 {
			chain = append(chain, blk(h, uint64(len(chain)+1)))
		}
	}
	tr := NewTree()
	r := rank(1, 0)
	bad := append(slices.Clone(chain), blk(uint64(chain[7].BlockHash), 99))
	if err := tr.Apply(storedRoot(r, bad...)); err == nil || tr.Len() != 0 {
		t.Fatalf("a chain repeating a name: err %v, %d entries; want rejected whole", err, tr.Len())
	}
	if err := tr.Apply(storedRoot(r, chain...)); err != nil || tr.Len() != len(chain) {
		t.Fatalf("the chain without the repeat: err %v, %d entries; want %d stored", err, tr.Len(), len(chain))
	}
	if tr.seen.len() != 0 {
		t.Fatalf("the exact set kept %d names", tr.seen.len())
	}
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
