package testutil

import "math/rand/v2"

// TokenPrompts returns distinct n-token prompts for three id
// distributions, for the benchmarks of the token-id decoders:
//   - "bench": the route benchmarks' consecutive ids from 100,000 up (six
//     digits; 3-byte varints);
//   - "uniform": kvbench's, uniform over a 50,000-id vocabulary (mostly
//     five digits, some four; 2- and 3-byte varints in random order);
//   - "zipf": a Zipf law over Qwen's 151,936-id vocabulary (frequent
//     words have small ids: one to six digits, 1- to 3-byte varints,
//     mixed).
//
// Benchmarks go round the distinct prompts: decoding one prompt over and
// over, the branch predictor learns its pattern of id lengths, which a
// router serving distinct prompts never sees. The prompts are the same on
// every call.
func TokenPrompts(n, distinct int) map[string][][]uint32 {
	out := map[string][][]uint32{}
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, 151935)
	r := rand.New(rand.NewPCG(5, 6))
	for p := range distinct {
		bench, uniform, zipf := make([]uint32, n), make([]uint32, n), make([]uint32, n)
		for i := range n {
			bench[i] = 100000 + uint32(p*n+i)
			uniform[i] = 1 + uint32(r.IntN(50_000-1))
			zipf[i] = uint32(z.Uint64())
		}
		out["bench"] = append(out["bench"], bench)
		out["uniform"] = append(out["uniform"], uniform)
		out["zipf"] = append(out["zipf"], zipf)
	}
	return out
}
