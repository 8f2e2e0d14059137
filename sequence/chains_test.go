package sequence

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// perBlock is the obvious model chainSet must agree with: a reference
// count and a weight per block hash.
type perBlock struct {
	refs   map[kv.SequenceHash]int
	weight map[kv.SequenceHash]float64
}

func (m *perBlock) add(hs []kv.SequenceHash, stride float64) (delta float64, root bool) {
	for i, h := range hs {
		if m.refs[h] == 0 {
			root = root || i == 0
			delta += stride
		} else {
			delta += stride * (1 - m.weight[h])
		}
		m.refs[h]++
		m.weight[h] = 1
	}
	return delta, root
}

func (m *perBlock) remove(hs []kv.SequenceHash, stride float64) (delta float64, root bool) {
	for i, h := range hs {
		if m.refs[h]--; m.refs[h] == 0 {
			delta -= stride * m.weight[h]
			delete(m.refs, h)
			delete(m.weight, h)
			root = root || i == 0
		}
	}
	return delta, root
}

func (m *perBlock) decay(hs []kv.SequenceHash, frac, stride float64) (delta float64) {
	for _, h := range hs {
		if m.refs[h] == 1 {
			delta += stride * (frac - m.weight[h])
			m.weight[h] = frac
		}
	}
	return delta
}

// chainOf is a chain of n sequence hashes whose blocks each take one of
// `choices` values: requests drawn this way share prefixes of every length
// and part at every depth.
func chainOf(rng *rand.Rand, n, choices int) []kv.SequenceHash {
	hs := make([]kv.SequenceHash, n)
	prev := uint64(0)
	for i := range hs {
		prev = (prev ^ uint64(1+rng.IntN(choices))) * 0x9e3779b97f4a7c15
		hs[i] = kv.SequenceHash(prev)
	}
	return hs
}

// chainSet agrees with the per-block model through random adds, removes
// (a request's own chain, as ActiveSequences calls it), decays and prefix
// queries: the weight deltas, the roots, the blocks held and the held
// prefix of random probes. Decay fractions are multiples of 1/8, so the
// sums are exact in either order.
func TestChainSetMatchesPerBlockModel(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		var c chainSet
		m := &perBlock{refs: map[kv.SequenceHash]int{}, weight: map[kv.SequenceHash]float64{}}
		var live [][]kv.SequenceHash
		stride := float64(1 + rng.IntN(8))
		for step := range 2000 {
			switch op := rng.IntN(10); {
			case op < 4 || len(live) == 0:
				hs := chainOf(rng, 1+rng.IntN(12), 1+rng.IntN(3))
				if rng.IntN(4) == 0 && len(live) > 0 {
					hs = slices.Clone(live[rng.IntN(len(live))]) // an identical prompt
				}
				gd, gr := c.add(hs, stride)
				wd, wr := m.add(hs, stride)
				if gd != wd || gr != wr {
					t.Fatalf("seed %d step %d: add = (%v, %v), the model says (%v, %v)", seed, step, gd, gr, wd, wr)
				}
				live = append(live, hs)
			case op < 7:
				i := rng.IntN(len(live))
				hs := live[i]
				live = slices.Delete(live, i, i+1)
				gd, gr := c.remove(hs, stride)
				wd, wr := m.remove(hs, stride)
				if gd != wd || gr != wr {
					t.Fatalf("seed %d step %d: remove = (%v, %v), the model says (%v, %v)", seed, step, gd, gr, wd, wr)
				}
			case op < 8:
				hs := live[rng.IntN(len(live))]
				frac := float64(rng.IntN(9)) / 8
				if gd, wd := c.decay(hs, frac, stride), m.decay(hs, frac, stride); gd != wd {
					t.Fatalf("seed %d step %d: decay = %v, the model says %v", seed, step, gd, wd)
				}
			default:
				probe := chainOf(rng, 1+rng.IntN(12), 1+rng.IntN(3))
				want := 0
				for want < len(probe) && m.refs[probe[want]] > 0 {
					want++
				}
				if got := heldPrefix(&c, probe); got != want {
					t.Fatalf("seed %d step %d: heldPrefix = %d, the model says %d", seed, step, got, want)
				}
			}
			if c.blocks != len(m.refs) {
				t.Fatalf("seed %d step %d: %d blocks held, the model holds %d", seed, step, c.blocks, len(m.refs))
			}
			var roots []kv.SequenceHash
			for _, hs := range live {
				roots = append(roots, hs[0])
			}
			slices.Sort(roots)
			got := c.rootHashes()
			slices.Sort(got)
			if !slices.Equal(got, slices.Compact(roots)) {
				t.Fatalf("seed %d step %d: roots %v, want %v", seed, step, got, slices.Compact(roots))
			}
		}
	}
}
