package scheduling

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/kvrouter/kvrouter/kv"
)

// ErrNoEligibleWorker: no candidate is left to route to.
var ErrNoEligibleWorker = errors.New("no eligible worker")

// Decision is the selected worker and why.
type Decision struct {
	Worker kv.WorkerWithDpRank
	// OverlapBlocks is the chosen rank's device prefix depth.
	OverlapBlocks uint32
	// EffectiveOverlapBlocks adds the weighted host and disk hits; Dynamo
	// reports its rounding as overlap_blocks.
	EffectiveOverlapBlocks float64
	// CachedTokens is the cache hit the chosen rank is expected to have,
	// the tokens the engine will not prefill.
	CachedTokens uint64
	Cost         float64
	// Candidates is how many ranks were scored.
	Candidates int
}

// Select scores cands with the configured cost (Dynamo's with RouterCost
// dynamo or "", TTFTCost with RouterCost ttft) and picks one. At temperature 0
// it takes the minimum, breaking exact ties uniformly at random (reservoir
// sampling, one draw per tie). Above 0 it samples
// p_i ∝ exp(−(c_i − c_min) / ((c_max − c_min)·T)), uniform when all costs
// are equal. requestBlocks is the prompt's block count (used by the credit
// decay; 0 counts as 1).
func Select(cfg Config, blockSize, isl, requestBlocks int, cands []Candidate, rng *rand.Rand) (Decision, error) {
	return SelectPhase(PhaseAggregated, cfg, blockSize, isl, requestBlocks, cands, rng)
}

// SelectPhase is Select with the cost of one phase of the request
// (PhasePrefill, PhaseDecode; PhaseAggregated is Select).
func SelectPhase(phase Phase, cfg Config, blockSize, isl, requestBlocks int, cands []Candidate, rng *rand.Rand) (Decision, error) {
	if len(cands) == 0 {
		return Decision{}, fmt.Errorf("select: %w", ErrNoEligibleWorker)
	}
	if rng == nil {
		return Decision{}, fmt.Errorf("select: nil random source: %w", ErrInvalidInput)
	}
	var buf [64]float64 // a fleet of up to 64 ranks is scored without allocating
	costs, err := ScorePhase(phase, cfg, blockSize, isl, requestBlocks, cands, buf[:0])
	if err != nil {
		return Decision{}, fmt.Errorf("select: %w", err)
	}
	pick := Pick(costs, cfg.Normalized().RouterTemperature, rng)
	return DecisionOf(cfg, blockSize, &cands[pick], costs[pick], len(cands)), nil
}

// ScorePhase writes each candidate's cost under phase and cfg.RouterCost
// into dst (grown as needed) and returns it: the scoring half of
// SelectPhase, validated like it.
func ScorePhase(phase Phase, cfg Config, blockSize, isl, requestBlocks int, cands []Candidate, dst []float64) ([]float64, error) {
	cc, err := preparePhase(phase, cfg, blockSize, isl, requestBlocks, cands)
	if err != nil {
		return dst, err
	}
	dst = slices.Grow(dst[:0], len(cands))[:len(cands)]
	for i := range cands {
		dst[i] = cc.cost(i, &cands[i])
	}
	return dst, nil
}

// Pick is SelectPhase's choice among scored candidates: at temperature 0
// the minimum, exact ties broken uniformly at random (reservoir sampling,
// one rng.IntN per tie); above 0 a sample of SoftmaxProbabilities (one
// rng.Float64). costs must not be empty.
func Pick(costs []float64, temperature float64, rng *rand.Rand) int {
	if temperature == 0 {
		return argminRandomTie(costs, rng)
	}
	return sampleSoftmax(costs, temperature, rng.Float64())
}

// DecisionOf is the Decision for choosing c at cost out of n candidates.
func DecisionOf(cfg Config, blockSize int, c *Candidate, cost float64, n int) Decision {
	cfg = cfg.Normalized()
	effective, cached := cacheHit(&cfg, blockSize, c.DeviceOverlap, c.HostOverlap, c.DiskOverlap)
	return Decision{
		Worker:                 c.Worker,
		OverlapBlocks:          c.DeviceOverlap,
		EffectiveOverlapBlocks: effective,
		CachedTokens:           cached,
		Cost:                   cost,
		Candidates:             n,
	}
}

// argminRandomTie returns the cheapest candidate; among k equal minima each
// is kept with probability 1/k without storing them.
func argminRandomTie(costs []float64, rng *rand.Rand) int {
	best, bestCost, ties := 0, math.Inf(1), 0
	for i, cost := range costs {
		switch {
		case cost < bestCost:
			best, bestCost, ties = i, cost, 1
		case cost == bestCost:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// SoftmaxProbabilities is the distribution Select samples from at
// temperature t > 0: costs min-max normalised to [0,1], divided by t,
// negated and exponentiated. Equal costs (or t ≤ 0) give the uniform
// distribution. The result sums to 1.
func SoftmaxProbabilities(costs []float64, t float64) []float64 {
	p := make([]float64, len(costs))
	if len(costs) == 0 {
		return p
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range costs {
		lo, hi = min(lo, c), max(hi, c)
	}
	if lo == hi || !(t > 0) || math.IsInf(hi-lo, 0) {
		for i := range p {
			p[i] = 1 / float64(len(p))
		}
		return p
	}
	scale := (hi - lo) * t
	sum := 0.0
	for i, c := range costs {
		p[i] = math.Exp(-(c - lo) / scale)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// sampleSoftmax returns the first index whose cumulative probability
// reaches u, the last one if rounding leaves u above the total.
func sampleSoftmax(costs []float64, t, u float64) int {
	p := SoftmaxProbabilities(costs, t)
	cumulative := 0.0
	for i, pi := range p {
		cumulative += pi
		if u <= cumulative {
			return i
		}
	}
	return len(p) - 1
}
