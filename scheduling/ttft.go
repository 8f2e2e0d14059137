package scheduling

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// CostModel is the cost a decision minimises (--router-cost).
type CostModel string

const (
	// CostDynamo is Dynamo's worker_logit (logit in cost.go), kept bit
	// for bit: prefill blocks left after cache credit plus decode blocks.
	// DefaultConfig (Dynamo's defaults) uses it, and so does an empty
	// RouterCost.
	CostDynamo CostModel = "dynamo"
	// CostTTFT predicts the request's time to first token on each rank
	// and what its uncached work costs the requests behind it (TTFTCost).
	CostTTFT CostModel = "ttft"

	// DefaultRouterCost is the router's --router-cost default: the ttft
	// cost, which had the highest hit rate of the costs compared in every
	// point of the cost table (README, "Choosing a cost"). DefaultConfig
	// keeps CostDynamo, so that it stays Dynamo's defaults.
	DefaultRouterCost = CostTTFT
)

// ParseCostModel accepts the cost model names.
func ParseCostModel(s string) (CostModel, error) {
	switch m := CostModel(s); m {
	case CostDynamo, CostTTFT:
		return m, nil
	}
	return "", fmt.Errorf("unknown router cost %q (want dynamo or ttft): %w", s, ErrInvalidConfig)
}

// TTFTConfig are the knobs of the ttft cost.
type TTFTConfig struct {
	// UncachedWeight (λ, default 2, ≥ 0) weighs the prefill time of the
	// request's own uncached tokens once more per unit, for the requests
	// that will queue behind it on that rank: a miss is paid by everyone
	// who arrives while it computes. 0 is the plain predicted TTFT, which
	// under load scatters prefixes (each request's TTFT is nearly equal
	// on the prefix's owner and on an idle rank, and the tie is broken
	// against the cache).
	UncachedWeight float64
	// KVHeadroom (φ, default 0.9, in (0,1]) is the fraction of a rank's
	// KV cache the active requests may fill before new ones are charged
	// for the wait: past it the engine has to evict the prefixes it holds
	// and, full, cannot admit the request until others finish.
	KVHeadroom float64
	// PrefillTokensPerSec (default 10,000, > 0) is the prefill throughput
	// assumed for a rank the router has not measured yet.
	PrefillTokensPerSec float64
}

// DefaultTTFTConfig returns the ttft cost's defaults, chosen on the
// offline fleet replays of kvbench's workloads (docs/benchmarks.md, "Routing quality").
func DefaultTTFTConfig() TTFTConfig {
	return TTFTConfig{UncachedWeight: 2, KVHeadroom: 0.9, PrefillTokensPerSec: 10000}
}

func (c TTFTConfig) validate() []error {
	var errs []error
	if !nonNegative(c.UncachedWeight) {
		errs = append(errs, fmt.Errorf("router_ttft_uncached_weight must be ≥ 0, got %v", c.UncachedWeight))
	}
	if !(c.KVHeadroom > 0 && c.KVHeadroom <= 1) {
		errs = append(errs, fmt.Errorf("router_ttft_kv_headroom must be in (0,1], got %v", c.KVHeadroom))
	}
	if !(c.PrefillTokensPerSec > 0) || math.IsInf(c.PrefillTokensPerSec, 1) {
		errs = append(errs, fmt.Errorf("router_prefill_tokens_per_sec must be > 0, got %v", c.PrefillTokensPerSec))
	}
	return errs
}

// RateDeadband is how far (±25%) a rank's measured prefill throughput
// may stray from the candidates' median and still count as the median.
// Identical ranks measure slightly different rates from the same noise;
// treating those as real would trade cache hits for nothing. A rank that
// is really slower (another GPU, a noisy neighbour) lies outside it.
const RateDeadband = 0.25

// TTFTCost is the ttft cost of one candidate, in seconds:
//
//	cached    = max(credited device + host + disk + shared overlap, blocks active on the rank) × block size
//	uncached  = isl − cached (≥ 0)
//	queued    = active prefill tokens − the head request's progress (rate × time at the head, ≤ its tokens)
//	cost      = (queued + uncached) / rate            predicted TTFT
//	          + λ · uncached / rate                   the time it takes from requests behind it
//	          + max(0, active + new blocks − φ·capacity) × block size / rate   waiting for KV
//
// Blocks active on the rank are the request's leading blocks held by
// requests in flight there (prompt blocks − new blocks): ones still
// being prefilled are cached by the time a request queued behind them is
// admitted, which is what keeps a burst of one prefix on one rank before
// its KV events arrive. rate is the rank's measured prefill throughput
// (the prior until measured; the median when within RateDeadband of it).
// The decode interference is inside the measured rate: a rank whose steps
// carry many decodes drains its prefill queue more slowly, and its
// completions show it.
func TTFTCost(cfg Config, blockSize, isl int, c Candidate, rate float64) float64 {
	return ttftCost(&cfg, blockSize, isl, &c, rate)
}

// ttftCost is TTFTCost without copying the config and the candidate (a
// decision prices every candidate with one of each).
func ttftCost(cfg *Config, blockSize, isl int, c *Candidate, rate float64) float64 {
	queued, uncached, over := ttftTerms(cfg, blockSize, isl, c, rate)
	return (queued + (1+cfg.TTFT.UncachedWeight)*uncached + over*float64(blockSize)) / rate
}

// ttftTerms are TTFTCost's parts: the prefill tokens queued ahead on the
// rank, the request's own uncached tokens, and the KV blocks over the
// headroom.
func ttftTerms(cfg *Config, blockSize, isl int, c *Candidate, rate float64) (queued, uncached, over float64) {
	t := &cfg.TTFT
	bs := float64(blockSize)
	credited := cfg.OverlapScoreCredit*float64(c.DeviceOverlap) +
		cfg.HostCacheHitWeight*float64(c.HostOverlap) +
		cfg.DiskCacheHitWeight*float64(c.DiskOverlap) +
		SharedCredit(cfg.SharedCacheMultiplier, c.DeviceOverlap, c.SharedOverlap)
	if c.HasLoad && cfg.OverlapScoreCredit > 0 {
		credited = max(credited, float64(c.ActivePrefixBlocks))
	}
	uncached = max(float64(isl)-credited*bs, 0)
	if c.HasLoad {
		progress := min(float64(c.HeadPrefillTokens), rate*c.HeadPrefillElapsed.Seconds())
		queued = max(float64(c.ActivePrefillTokens)-max(progress, 0), 0)
		if c.CapacityBlocks > 0 {
			over = max(c.ActiveBlocks+float64(c.NewBlocks)-t.KVHeadroom*float64(c.CapacityBlocks), 0)
		}
	} else if c.CapacityBlocks > 0 {
		over = max(float64(c.NewBlocks)-t.KVHeadroom*float64(c.CapacityBlocks), 0)
	}
	return queued, uncached, over
}

// effectiveRates resolves each candidate's prefill throughput: its own
// measurement when it is further than RateDeadband from the median of
// the busy candidates' measurements, else that median; the prior when no
// busy candidate is measured. A rank with nothing in flight runs at the
// median whatever it measured before: neither a guess (the prior) nor an
// old slow spell may make a rank look slow while it is idle, because an
// idle rank would then get no request that could measure it again.
func effectiveRates(prior float64, cands []Candidate) []float64 {
	rates := make([]float64, len(cands))
	var measured []float64
	for i := range cands {
		if r, ok := cands[i].measuredRate(); ok {
			measured = append(measured, r)
		}
	}
	median := prior
	if len(measured) > 0 {
		slices.Sort(measured)
		median = measured[len(measured)/2]
	}
	for i := range cands {
		rates[i] = median
		if r, ok := cands[i].measuredRate(); ok && math.Abs(r/median-1) > RateDeadband {
			rates[i] = r
		}
	}
	return rates
}

// measuredRate is the candidate's measured prefill throughput, if it has
// one and requests in flight.
func (c *Candidate) measuredRate() (float64, bool) {
	r := c.PrefillTokensPerSec
	return r, c.HasLoad && c.ActiveRequests > 0 && r > 0 && !math.IsInf(r, 1)
}

// PrefillRate learns a rank's prefill throughput from the prefill
// completions the router observes. The rank's prefill is one FCFS server:
// a completion drained its request's tokens over the time since the later
// of its arrival and the previous completion. The estimate is the ratio
// of exponentially weighted sums of tokens and those service times
// (PrefillRateAlpha per sample), so long prefills weigh more than short
// ones and a burst of completions in one engine step averages out. It
// counts the steps' decode work too: that is the throughput a queued
// request will see. The zero value is ready to use.
type PrefillRate struct {
	tokens, seconds float64
	samples         int
	lastDone        time.Time
}

// Estimator constants.
const (
	// PrefillRateAlpha is each sample's weight.
	PrefillRateAlpha = 0.05
	// PrefillRateMinSamples completions are needed before TokensPerSec
	// reports anything.
	PrefillRateMinSamples = 8
	// maxServiceTime bounds a sample: a longer one is a lost completion
	// or a stalled engine, not a throughput.
	maxServiceTime = 10 * time.Minute
)

// Observe records that a request with tokens uncached prompt tokens,
// added at added, completed its prefill at done. Zero-token requests and
// out-of-order or implausible intervals move the clock but add no sample.
func (p *PrefillRate) Observe(tokens uint64, added, done time.Time) {
	start := added
	if p.lastDone.After(start) {
		start = p.lastDone
	}
	if done.After(p.lastDone) {
		p.lastDone = done
	}
	service := done.Sub(start)
	if tokens == 0 || service <= 0 || service > maxServiceTime {
		return
	}
	p.tokens = (1-PrefillRateAlpha)*p.tokens + PrefillRateAlpha*float64(tokens)
	p.seconds = (1-PrefillRateAlpha)*p.seconds + PrefillRateAlpha*service.Seconds()
	p.samples++
}

// TokensPerSec is the estimate, 0 before PrefillRateMinSamples samples.
func (p *PrefillRate) TokensPerSec() float64 {
	if p.samples < PrefillRateMinSamples || !(p.seconds > 0) {
		return 0
	}
	return p.tokens / p.seconds
}

// LastDone is the latest completion observed: the request at the head of
// the prefill queue has been served since the later of this and its own
// arrival.
func (p *PrefillRate) LastDone() time.Time { return p.lastDone }

// HeadStart is when the oldest request still in prefill, added at added,
// reached the head of the queue: the later of its arrival and the last
// completion before it.
func (p *PrefillRate) HeadStart(added time.Time) time.Time {
	if p.lastDone.After(added) {
		return p.lastDone
	}
	return added
}

// HeadElapsed is how long the oldest request still in prefill, added at
// added, has been at the head of the queue at now.
func (p *PrefillRate) HeadElapsed(added, now time.Time) time.Duration {
	return SinceHeadStart(p.HeadStart(added), now)
}

// SinceHeadStart is the head's time in service at now, given HeadStart's
// answer (a reader holding a published load computes it when it decides).
func SinceHeadStart(start, now time.Time) time.Duration {
	return max(now.Sub(start), 0)
}

// SinceHeadStartUnixNano is SinceHeadStart for a start published as Unix
// nanoseconds: the reader takes its clock once per decision and subtracts
// integers instead of building a time per candidate.
func SinceHeadStartUnixNano(start, now int64) time.Duration {
	return max(time.Duration(now-start), 0)
}

// Routed is a decision recorded while another was still collecting its
// loads: the later decision's loads do not show it yet. A burst of
// requests arriving together is decided concurrently (each fans out to
// the ranks before the others are recorded), and without this every
// request of the burst would see the same idle rank as the cheapest.
type Routed struct {
	Worker kv.WorkerWithDpRank
	// PrefillTokens and NewBlocks are what the decision added to its
	// rank's prefill load and active blocks; Hashes its prompt's sequence
	// hashes, sampled as the load queries sample them (one per stride
	// blocks).
	PrefillTokens uint64
	NewBlocks     uint64
	Hashes        []uint64
}

// AddRouted folds routed decisions that cands' loads do not include into
// them, for a request whose sampled sequence hashes are hashes and whose
// prompt has promptBlocks blocks (stride blocks per hash): each routed
// decision adds its prefill tokens, one request and its new blocks to its
// rank, and the prefix it shares with the request counts as in flight
// there (ActivePrefixBlocks, NewBlocks), as the rank's tracker reports
// once it has the decision. Both costs read the result: a sequential
// scheduler (Dynamo's) sees each decision before taking the next.
func AddRouted(cands []Candidate, hashes []uint64, promptBlocks uint64, stride int, routed []Routed) {
	stride = max(stride, 1)
	for _, r := range routed {
		for i := range cands {
			c := &cands[i]
			if c.Worker != r.Worker {
				continue
			}
			if !c.HasLoad {
				c.HasLoad, c.NewBlocks = true, promptBlocks
			}
			c.ActivePrefillTokens += r.PrefillTokens
			c.ActiveRequests++
			c.ActiveBlocks += float64(r.NewBlocks)
			// A trailing group shorter than the stride has no sampled
			// hash and counts as the request's own (CountNewBlocks).
			shared := min(uint64(commonPrefix(hashes, r.Hashes)*stride), promptBlocks)
			c.ActivePrefixBlocks = max(c.ActivePrefixBlocks, uint32(shared))
			c.NewBlocks = min(c.NewBlocks, promptBlocks-shared)
		}
	}
}

func commonPrefix(a, b []uint64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
