package sequence

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// A scheduler mirrors each rank's roots from TakeRootChanges alone; after
// any mix of adds, frees, origin drops and expiries, taken at any moments,
// the mirror must equal Roots, and a prompt must share active blocks with
// the rank exactly when its first hash is a root (so a rank whose roots
// miss the prompt can be answered without asking it).
func TestRootChangesMirrorRoots(t *testing.T) {
	for _, stride := range []int{1, 4} {
		t.Run(fmt.Sprintf("stride %d", stride), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(stride)))
			s := New(Config{AssumeKVReuse: true, Stride: stride, ExpiryDuration: time.Minute})
			mirror := map[kv.SequenceHash]bool{}
			take := func() {
				added, removed := s.TakeRootChanges()
				for _, h := range removed {
					if !mirror[h] {
						t.Fatalf("removed root %x the mirror does not hold", h)
					}
					delete(mirror, h)
				}
				for _, h := range added {
					if mirror[h] {
						t.Fatalf("added root %x the mirror holds already", h)
					}
					mirror[h] = true
				}
			}
			// Prompts are chains over 6 roots: requests share prefixes.
			chain := func(root, n int) []kv.SequenceHash {
				out := make([]kv.SequenceHash, n)
				for i := range out {
					out[i] = kv.SequenceHash(uint64(root)<<32 | uint64(i))
				}
				return out
			}
			now := time.Unix(1000, 0)
			var ids []string
			for step := range 3000 {
				now = now.Add(time.Second)
				switch op := rng.IntN(10); {
				case op < 5:
					id := fmt.Sprintf("r%d", step)
					origin := []string{"", "peer-a", "peer-b"}[rng.IntN(3)]
					hashes := chain(rng.IntN(6), 1+rng.IntN(5))
					if err := s.AddRequest(Request{ID: id, Origin: origin, SequenceHashes: hashes, ISL: 64}, now); err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
				case op < 8 && len(ids) > 0:
					i := rng.IntN(len(ids))
					_ = s.Free(ids[i]) // may be gone already (origin drop, expiry)
					ids = slices.Delete(ids, i, i+1)
				case op == 8:
					s.FreeOrigin([]string{"peer-a", "peer-b"}[rng.IntN(2)])
				default:
					s.ExpireStale(now.Add(-30 * time.Second).Add(time.Minute)) // drops requests older than 30 s
				}
				if rng.IntN(3) == 0 {
					take()
					roots := s.Roots()
					if len(roots) != len(mirror) {
						t.Fatalf("step %d: mirror has %d roots, tracker %d", step, len(mirror), len(roots))
					}
					for _, h := range roots {
						if !mirror[h] {
							t.Fatalf("step %d: root %x missing from the mirror", step, h)
						}
					}
					for root := range 7 {
						prompt := chain(root, 5)
						shares := CountNewBlocks(s, prompt, uint64(5*stride)) < uint64(5*stride)
						if shares != mirror[prompt[0]] {
							t.Fatalf("step %d: prompt of root %d shares active blocks %v, mirror says %v", step, root, shares, mirror[prompt[0]])
						}
					}
				}
			}
		})
	}
}

func TestRootsEmptyWithoutKVReuse(t *testing.T) {
	s := New(Config{})
	if err := s.AddRequest(Request{ID: "a", SequenceHashes: []kv.SequenceHash{1, 2}, ISL: 32}, time.Now()); err != nil {
		t.Fatal(err)
	}
	added, removed := s.TakeRootChanges()
	if len(s.Roots()) != 0 || len(added) != 0 || len(removed) != 0 {
		t.Fatalf("roots %v, changes %v %v: nothing is shared without kv reuse", s.Roots(), added, removed)
	}
}
