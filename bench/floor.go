package bench

import (
	"fmt"
	"time"
)

// IdlePrefill is the wall time an idle engine of the fleet takes from a
// prompt's arrival to its first token with nothing of it cached: steps of
// up to MaxBatchedTokens prompt tokens, each lasting StepBaseTime plus its
// tokens over PrefillTokensPerSec (the mock engine's step model, in model
// time), divided by Speedup. The first token comes out of the step that
// finishes the prompt.
func (f OracleFleet) IdlePrefill(tokens int) time.Duration {
	var model time.Duration
	for done := 0; done < tokens; {
		n := min(f.MaxBatchedTokens, tokens-done)
		model += f.StepBaseTime + time.Duration(float64(n)/f.PrefillTokensPerSec*float64(time.Second))
		done += n
	}
	return time.Duration(float64(model) / f.Speedup)
}

// TTFTFloorP90 is the physical floor a point's TTFT p90 is judged
// against, in milliseconds: the p90, over the requests after the first
// warmup, of each prompt's IdlePrefill. A router that hits the cache can
// go below it; with no hits, no router can.
func TTFTFloorP90(reqs []Request, f OracleFleet, warmup int) (float64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	if warmup < 0 || warmup >= len(reqs) {
		return 0, fmt.Errorf("%w: warm-up of %d requests in a schedule of %d", ErrBadWorkload, warmup, len(reqs))
	}
	ms := make([]float64, 0, len(reqs)-warmup)
	for _, r := range reqs[warmup:] {
		ms = append(ms, float64(f.IdlePrefill(len(r.Tokens)))/float64(time.Millisecond))
	}
	return Percentile(ms, 90), nil
}
