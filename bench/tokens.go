package bench

import "math/rand/v2"

// vocabSize bounds synthesized token ids. Real vocabularies are larger;
// any bound well above the block size keeps accidental block collisions
// out of the picture.
const vocabSize = 50_000

// newRand returns a deterministic generator for one stream of a workload.
// stream separates independent uses of the same seed (prompts, arrivals,
// group picks) so changing one does not shift the others.
func newRand(seed uint64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream^0x9e3779b97f4a7c15))
}

// randomTokens appends n token ids drawn from r.
func randomTokens(dst []uint32, r *rand.Rand, n int) []uint32 {
	for range n {
		dst = append(dst, 1+uint32(r.IntN(vocabSize-1)))
	}
	return dst
}
