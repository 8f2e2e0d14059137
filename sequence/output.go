package sequence

import "fmt"

// AddOutputBlock grows request id by one generated block and re-weights the
// blocks only this request holds, Dynamo's fractional output blocks.
//
// The rule: the new output block is added, then every block held by this
// request alone — its output blocks, its private prompt blocks (AssumeKVReuse
// off) and its shared-map prompt blocks whose reference count is 1 — gets
// weight decayFrac in ActiveBlocks. Blocks other requests also hold keep
// their weight. Callers pass DecayFraction(generated, expected): a request
// nearing its expected output is about to release its blocks, so they weigh
// less on the rank's future load; 1 means no decay.
//
// It needs TrackOutputBlocks (else ErrOutputTrackingDisabled); decayFrac
// outside [0, 1] (or NaN) is ErrInvalidDecay.
func (s *ActiveSequences) AddOutputBlock(id string, decayFrac float64) error {
	if !s.cfg.TrackOutputBlocks {
		return fmt.Errorf("add output block %q: %w", id, ErrOutputTrackingDisabled)
	}
	st, ok := s.requests[id]
	if !ok {
		return fmt.Errorf("add output block %q: %w", id, ErrUnknownRequest)
	}
	if !(decayFrac >= 0 && decayFrac <= 1) {
		return fmt.Errorf("add output block %q: got %v: %w", id, decayFrac, ErrInvalidDecay)
	}

	before := float64(st.exclusiveBlocks()) * st.exclusiveWeight
	st.outputBlocks++
	st.exclusiveWeight = decayFrac
	s.exclusiveWeight += float64(st.exclusiveBlocks())*decayFrac - before

	if s.cfg.AssumeKVReuse {
		s.sharedWeight += s.chains.decay(st.hashes, decayFrac, float64(s.cfg.EffectiveStride()))
	}
	return nil
}

// DecayFraction is the weight Dynamo's router gives a request's own blocks
// after it generated `generated` of `expected` output tokens:
// max(0, 1 − generated/expected). An unknown expectation (0) means no
// decay, 1.
func DecayFraction(generated, expected uint64) float64 {
	if expected == 0 {
		return 1
	}
	f := 1 - float64(generated)/float64(expected)
	if f < 0 {
		return 0
	}
	return f
}
