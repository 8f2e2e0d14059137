package scheduling

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// ErrInvalidInput: a request or candidate the cost cannot be computed for
// (non-positive block size, negative lengths, NaN loads, nil rng).
var ErrInvalidInput = errors.New("invalid scheduling input")

// CacheHitEstimate turns a worker's tiered overlap into the effective
// number of cached blocks (device blocks count 1, host and disk blocks
// their configured weights) and the cached tokens that implies, rounded
// to the nearest token: Dynamo's cache_hit_estimates. A non-positive
// blockSize yields 0 cached tokens.
func CacheHitEstimate(cfg Config, blockSize int, device, host, disk uint32) (effectiveBlocks float64, cachedTokens uint64) {
	return cacheHit(&cfg, blockSize, device, host, disk)
}

func cacheHit(cfg *Config, blockSize int, device, host, disk uint32) (effectiveBlocks float64, cachedTokens uint64) {
	effectiveBlocks = float64(device) +
		cfg.HostCacheHitWeight*float64(host) +
		cfg.DiskCacheHitWeight*float64(disk)
	if blockSize <= 0 {
		return effectiveBlocks, 0
	}
	tokens := math.Round(effectiveBlocks * float64(blockSize))
	if !(tokens > 0) {
		return effectiveBlocks, 0
	}
	return effectiveBlocks, uint64(tokens)
}

// BestCacheHit is the largest CacheHitEstimate among cands, in tokens (0
// for none): the cache hit the best-placed rank could give the request,
// whichever rank is chosen.
func BestCacheHit(cfg *Config, blockSize int, cands []Candidate) uint64 {
	best := uint64(0)
	for i := range cands {
		c := &cands[i]
		_, cached := cacheHit(cfg, blockSize, c.DeviceOverlap, c.HostOverlap, c.DiskOverlap)
		best = max(best, cached)
	}
	return best
}

// Candidate is one worker rank with what the indexer and its sequence
// tracker reported for the request being routed.
type Candidate struct {
	Worker kv.WorkerWithDpRank
	// DeviceOverlap is the prefix depth cached on the GPU; HostOverlap and
	// DiskOverlap are the blocks continuing that prefix in lower tiers.
	DeviceOverlap, HostOverlap, DiskOverlap uint32
	// SharedOverlap is the request's prefix depth in the shared tier (the
	// same for every candidate: any worker can load it); the cost credits
	// the part beyond DeviceOverlap (SharedCredit).
	SharedOverlap       uint32
	ActivePrefillTokens uint64
	// ActiveBlocks are the blocks the rank holds for active requests.
	ActiveBlocks float64
	// NewBlocks are this request's prompt blocks not already active there.
	NewBlocks      uint64
	ActiveRequests int
	// HasLoad is false when the rank's load is unknown (its tracker did not
	// answer in time): it is then treated as idle, as Dynamo treats a worker
	// without a load entry.
	HasLoad bool

	// What the ttft cost (TTFTCost) reads besides the above; Dynamo's
	// cost ignores them.
	//
	// ActivePrefixBlocks is how many of the request's leading blocks are
	// held by requests in flight on the rank (prompt blocks − NewBlocks).
	ActivePrefixBlocks uint32
	// PrefillTokensPerSec is the rank's measured prefill throughput
	// (PrefillRate), 0 when not measured yet.
	PrefillTokensPerSec float64
	// HeadPrefillTokens are the tokens still to prefill of the oldest
	// request in prefill on the rank, HeadPrefillElapsed how long it has
	// been at the head of the queue (PrefillRate.HeadElapsed).
	HeadPrefillTokens  uint64
	HeadPrefillElapsed time.Duration
	// CapacityBlocks is the rank's KV cache size in blocks (its
	// heartbeat's total_kv_blocks), 0 when unknown.
	CapacityBlocks uint64
}

func (c *Candidate) activePrefill() uint64 {
	if c.HasLoad {
		return c.ActivePrefillTokens
	}
	return 0
}

func (c *Candidate) validate() error {
	if c.HasLoad && (!(c.ActiveBlocks >= 0) || math.IsInf(c.ActiveBlocks, 1) || c.ActiveRequests < 0) {
		return fmt.Errorf("candidate %s: active blocks %v, active requests %d: %w",
			c.Worker, c.ActiveBlocks, c.ActiveRequests, ErrInvalidInput)
	}
	return nil
}

// costContext holds what every candidate's cost shares.
type costContext struct {
	cfg              Config // normalised
	blockSize        float64
	isl              float64
	requestBlocks    float64
	minActivePrefill uint64
	// rates are the candidates' prefill throughputs for the ttft cost
	// (effectiveRates), by candidate index.
	rates []float64
	// phase is which part of the request the cost prices.
	phase Phase
}

// cost is candidate i's cost under the configured model.
func (cc *costContext) cost(i int, c *Candidate) float64 {
	switch cc.phase {
	case PhaseDecode:
		return cc.decodeLogit(c)
	case PhasePrefill:
		if cc.cfg.RouterCost != CostTTFT {
			return cc.prefillLogit(c)
		}
	}
	if cc.cfg.RouterCost == CostTTFT {
		return ttftCost(&cc.cfg, int(cc.blockSize), int(cc.isl), c, cc.rates[i])
	}
	return cc.logit(c)
}

func newCostContext(cfg Config, blockSize, isl, requestBlocks int) (costContext, error) {
	if blockSize <= 0 {
		return costContext{}, fmt.Errorf("block size %d: %w", blockSize, ErrInvalidInput)
	}
	if isl <= 0 {
		return costContext{}, fmt.Errorf("isl %d: a request needs at least one token: %w", isl, ErrInvalidInput)
	}
	if requestBlocks < 0 {
		return costContext{}, fmt.Errorf("request blocks %d: %w", requestBlocks, ErrInvalidInput)
	}
	if requestBlocks == 0 {
		// A prompt shorter than a block still costs something; the decay
		// divides by it.
		requestBlocks = 1
	}
	return costContext{
		cfg:           cfg.Normalized(),
		blockSize:     float64(blockSize),
		isl:           float64(isl),
		requestBlocks: float64(requestBlocks),
	}, nil
}

// credit is the overlap's worth in prefill blocks, and the prefill
// blocks the rank would have to compute before it (raw, with the queue
// already there).
func (cc *costContext) prefillTerms(c *Candidate) (rawPrefill, credit float64) {
	cfg := &cc.cfg
	active := c.activePrefill()
	decay := 1.0
	if cfg.TrackPrefillTokens {
		rawPrefill = (float64(active) + cc.isl) / cc.blockSize
		if cfg.OverlapScoreCreditDecay > 0 && active > cc.minActivePrefill {
			excessBlocks := float64(active-cc.minActivePrefill) / cc.blockSize
			decay = 1 / (1 + cfg.OverlapScoreCreditDecay*excessBlocks/cc.requestBlocks)
		}
	}
	return rawPrefill, cc.credit(c, decay)
}

// credit is Dynamo's overlap_credit_blocks: the device prefix (its
// credit decayed by decay), the host and disk continuations and the
// shared tier beyond the device prefix, each at its weight.
func (cc *costContext) credit(c *Candidate, decay float64) float64 {
	cfg := &cc.cfg
	return cfg.OverlapScoreCredit*decay*float64(c.DeviceOverlap) +
		cfg.HostCacheHitWeight*float64(c.HostOverlap) +
		cfg.DiskCacheHitWeight*float64(c.DiskOverlap) +
		SharedCredit(cfg.SharedCacheMultiplier, c.DeviceOverlap, c.SharedOverlap)
}

// logit is Dynamo's worker_logit (2026 formula):
//
//	raw_prefill   = track_prefill ? (active_prefill + isl) / block_size : 0
//	decay         = 1 / (1 + credit_decay · max(0, active_prefill − min_active_prefill)/block_size / request_blocks)
//	credit        = overlap_score_credit·decay·device + host_w·host + disk_w·disk
//	              + shared_cache_multiplier·max(0, shared − device)      (SharedCredit)
//	adjusted      = max(raw_prefill − credit, 0)
//	decode        = active_blocks + new_blocks
//	cost          = prefill_load_scale·adjusted + decode + decode_active_request_weight·active_requests
func (cc *costContext) logit(c *Candidate) float64 {
	cfg := &cc.cfg
	adjusted, decode, requests := cc.logitTerms(c)
	return cfg.PrefillLoadScale*adjusted + decode + cfg.DecodeActiveRequestWeight*requests
}

// logitTerms are logit's parts: the prefill blocks left after credit,
// the decode blocks, and the active requests.
func (cc *costContext) logitTerms(c *Candidate) (adjusted, decode, requests float64) {
	rawPrefill, credit := cc.prefillTerms(c)
	adjusted = max(rawPrefill-credit, 0)
	decode = float64(c.NewBlocks)
	if c.HasLoad {
		decode += c.ActiveBlocks
		requests = float64(c.ActiveRequests)
	}
	return adjusted, decode, requests
}

// Logit is the cost of one candidate scored in isolation: it is its own
// least-loaded peer, so OverlapScoreCreditDecay does not apply (use Costs
// to score a set). Inputs Costs would reject (blockSize or isl ≤ 0,
// negative requestBlocks) give NaN.
func Logit(cfg Config, blockSize, isl, requestBlocks int, c Candidate) float64 {
	cc, err := newCostContext(cfg, blockSize, isl, requestBlocks)
	if err != nil {
		return math.NaN()
	}
	cc.minActivePrefill = c.activePrefill()
	return cc.logit(&c)
}

// Costs scores every candidate against the others under cfg.RouterCost
// (Dynamo's credit decay compares each to the least prefill-loaded
// candidate; the ttft cost resolves rates against the candidates'
// median). It validates cfg and the inputs.
func Costs(cfg Config, blockSize, isl, requestBlocks int, cands []Candidate) ([]float64, error) {
	cc, err := prepare(cfg, blockSize, isl, requestBlocks, cands)
	if err != nil {
		return nil, err
	}
	costs := make([]float64, len(cands))
	for i := range cands {
		costs[i] = cc.cost(i, &cands[i])
	}
	return costs, nil
}

func prepare(cfg Config, blockSize, isl, requestBlocks int, cands []Candidate) (costContext, error) {
	return preparePhase(PhaseAggregated, cfg, blockSize, isl, requestBlocks, cands)
}

func preparePhase(phase Phase, cfg Config, blockSize, isl, requestBlocks int, cands []Candidate) (costContext, error) {
	if err := cfg.Validate(); err != nil {
		return costContext{}, err
	}
	cc, err := newCostContext(cfg, blockSize, isl, requestBlocks)
	if err != nil {
		return costContext{}, err
	}
	minActive := uint64(math.MaxUint64)
	for i := range cands {
		if err := cands[i].validate(); err != nil {
			return costContext{}, err
		}
		minActive = min(minActive, cands[i].activePrefill())
	}
	if len(cands) > 0 {
		cc.minActivePrefill = minActive
	}
	if cc.cfg.RouterCost == CostTTFT {
		cc.rates = effectiveRates(cc.cfg.TTFT.PrefillTokensPerSec, cands)
	}
	cc.phase = phase
	return cc, nil
}
