// Package scheduling decides which worker rank serves a request, with the
// semantics of Dynamo's DefaultWorkerSelector: a cost per candidate that
// trades the prefill work left after cache hits against decode load, an
// argmin (or a softmax at positive temperature), eligibility filters, the
// overload check that parks requests, and the bounded waiting queue.
//
// The package is pure: no goroutines, no clock (time is passed in), and
// randomness comes from an injected *rand.Rand.
package scheduling

import (
	"errors"
	"fmt"
	"math"
)

// QueuePolicy orders the waiting queue (router_queue_policy).
type QueuePolicy string

const (
	// PolicyFCFS: key = priority_jump − arrival offset in seconds; earliest
	// first, a priority jump of x seconds overtakes x seconds of waiting.
	// Best for tail TTFT.
	PolicyFCFS QueuePolicy = "fcfs"
	// PolicyWSPT: key = (1 + priority_jump) / uncached prompt tokens
	// (Smith's rule); short prompts first. Best for mean TTFT.
	PolicyWSPT QueuePolicy = "wspt"
	// PolicyLCFS: key = priority_jump + arrival offset; newest first. Dynamo
	// keeps it for policy experiments.
	PolicyLCFS QueuePolicy = "lcfs"
)

// ParseQueuePolicy accepts Dynamo's policy names.
func ParseQueuePolicy(s string) (QueuePolicy, error) {
	switch p := QueuePolicy(s); p {
	case PolicyFCFS, PolicyWSPT, PolicyLCFS:
		return p, nil
	}
	return "", fmt.Errorf("unknown queue policy %q (want fcfs, wspt or lcfs): %w", s, ErrInvalidConfig)
}

// Defaults and ceilings.
const (
	// DefaultRouterQueueThreshold is Dynamo's router_queue_threshold in code
	// (Some(16.0)): park requests while every eligible worker has more than
	// 16 × max_num_batched_tokens of prefill queued. Dynamo's README calls
	// queueing "disabled by default"; the code wins here.
	DefaultRouterQueueThreshold = 16.0
	// DefaultMaxQueueLength bounds the waiting queue. Dynamo's queue is
	// unbounded unless ISL-token tiers are configured; an unbounded queue
	// is how a router runs out of memory, so ours always has a bound.
	DefaultMaxQueueLength = 1024
	// MaxQueueLengthCeiling keeps a typo from allocating a giant heap.
	MaxQueueLengthCeiling = 1 << 20
)

// ErrInvalidConfig is wrapped by every Validate failure.
var ErrInvalidConfig = errors.New("invalid scheduling config")

// Config carries Dynamo's KvRouterConfig knobs that the decision reads.
type Config struct {
	// OverlapScoreWeight is the deprecated overlap_score_weight (old default
	// 1.0). nil means unset. When set it wins over the new knobs: it becomes
	// PrefillLoadScale, and a weight of 0 also sets OverlapScoreCredit to 0
	// (Dynamo's migration rule). Normalized applies it.
	OverlapScoreWeight *float64

	// OverlapScoreCredit (default 1.0, range [0,1]) is how many prefill
	// blocks each device-cached prefix block saves. 0 ignores the cache.
	OverlapScoreCredit float64
	// PrefillLoadScale (default 1.0, ≥0) multiplies the prefill blocks left
	// after credits: above 1 favours TTFT, below 1 favours decode (ITL).
	PrefillLoadScale float64
	// OverlapScoreCreditDecay (default 0 = off, ≥0) shrinks the device
	// credit of workers whose prefill backlog exceeds the least-loaded
	// candidate's: credit × 1/(1 + decay × excess_blocks/request_blocks).
	OverlapScoreCreditDecay float64
	// HostCacheHitWeight (default 0.75) and DiskCacheHitWeight (default
	// 0.25), both in [0,1], credit blocks cached in host memory and on disk:
	// they must be copied back, so they save less than a device hit.
	HostCacheHitWeight float64
	DiskCacheHitWeight float64
	// SharedCacheMultiplier (Dynamo's shared_cache_multiplier, default 0
	// = off, ≥0) credits every candidate with this many prefill blocks per
	// block of the prompt's shared-tier prefix beyond its own device
	// prefix (SharedCredit). Dynamo's CLI sets 0.5 when a shared cache is
	// configured.
	SharedCacheMultiplier float64

	// RouterTemperature (default 0, ≥0): 0 picks the cheapest worker, ties
	// broken uniformly at random; above 0 samples a softmax over min-max
	// normalised costs, spreading load at the price of cache hits.
	RouterTemperature float64

	// TrackPrefillTokens (router_track_prefill_tokens, default true) counts
	// the prompt in the prefill cost. Off, the cost is decode load only.
	TrackPrefillTokens bool
	// AssumeKVReuse (router_assume_kv_reuse, default true) is carried for
	// the per-request override; the sequence trackers apply it.
	AssumeKVReuse bool

	// RouterQueueEnabled and RouterQueueThreshold are Dynamo's
	// Option<f64> router_queue_threshold: when enabled (default, 16.0),
	// requests wait while every eligible worker has more than threshold ×
	// max_num_batched_tokens prompt tokens in prefill. Threshold ≥ 0.
	RouterQueueEnabled   bool
	RouterQueueThreshold float64
	// RouterQueuePolicy orders waiting requests (default fcfs).
	RouterQueuePolicy QueuePolicy
	// MaxQueueLength bounds the waiting queue (default 1024); a full queue
	// rejects with *OverloadError.
	MaxQueueLength int

	// DecodeActiveRequestWeight (default 0, ≥0) adds a per-request cost in
	// blocks, for engines whose decode step time grows with batch size.
	DecodeActiveRequestWeight float64

	// RouterCost is the cost decisions minimise: Dynamo's formula (the
	// value in DefaultConfig, and what "" means), or the predicted-TTFT
	// cost (TTFTCost) with the knobs in TTFT. The router's flag
	// --router-cost defaults to DefaultRouterCost.
	RouterCost CostModel
	TTFT       TTFTConfig

	// MaxLocalPrefillLength (max_local_prefill_length, Dynamo's
	// DisaggRouterConf, default 1000 tokens, ≥ 0) is conditional
	// disaggregation: in a fleet with prefill and decode pools, a request
	// whose prompt the chosen decode worker would still have to compute
	// (prompt tokens − its cached prefix) is no longer than this is
	// prefilled on the decode worker itself, without a KV transfer.
	MaxLocalPrefillLength uint64
}

// DefaultMaxLocalPrefillLength is Dynamo's max_local_prefill_length.
const DefaultMaxLocalPrefillLength = 1000

// DefaultConfig returns Dynamo's defaults.
func DefaultConfig() Config {
	return Config{
		OverlapScoreCredit:        1.0,
		PrefillLoadScale:          1.0,
		OverlapScoreCreditDecay:   0,
		HostCacheHitWeight:        0.75,
		DiskCacheHitWeight:        0.25,
		RouterTemperature:         0,
		TrackPrefillTokens:        true,
		AssumeKVReuse:             true,
		RouterQueueEnabled:        true,
		RouterQueueThreshold:      DefaultRouterQueueThreshold,
		RouterQueuePolicy:         PolicyFCFS,
		MaxQueueLength:            DefaultMaxQueueLength,
		DecodeActiveRequestWeight: 0,
		RouterCost:                CostDynamo,
		TTFT:                      DefaultTTFTConfig(),
		MaxLocalPrefillLength:     DefaultMaxLocalPrefillLength,
	}
}

// Normalized applies the deprecated OverlapScoreWeight (if set) and clears
// it, so the rest of the package reads only the new knobs.
func (c Config) Normalized() Config {
	if c.OverlapScoreWeight != nil {
		w := *c.OverlapScoreWeight
		c.PrefillLoadScale = w
		if w == 0 {
			c.OverlapScoreCredit = 0
		}
		c.OverlapScoreWeight = nil
	}
	return c
}

// Validate reports every out-of-range knob (after applying the migration
// rule, so a deprecated weight is checked as the scale it becomes).
func (c Config) Validate() error {
	n := c.Normalized()
	// Plain ifs rather than a helper taking ...any: boxing the arguments
	// would allocate on every call, and Select validates per decision.
	var errs []error
	if !inRange(n.OverlapScoreCredit, 0, 1) {
		errs = append(errs, fmt.Errorf("overlap_score_credit must be in [0,1], got %v (to favour prefill load use prefill_load_scale instead)", n.OverlapScoreCredit))
	}
	if !nonNegative(n.PrefillLoadScale) {
		errs = append(errs, fmt.Errorf("prefill_load_scale must be ≥ 0, got %v", n.PrefillLoadScale))
	}
	if !nonNegative(n.OverlapScoreCreditDecay) {
		errs = append(errs, fmt.Errorf("overlap_score_credit_decay must be ≥ 0, got %v", n.OverlapScoreCreditDecay))
	}
	if !inRange(n.HostCacheHitWeight, 0, 1) {
		errs = append(errs, fmt.Errorf("host_cache_hit_weight must be in [0,1], got %v", n.HostCacheHitWeight))
	}
	if !inRange(n.DiskCacheHitWeight, 0, 1) {
		errs = append(errs, fmt.Errorf("disk_cache_hit_weight must be in [0,1], got %v", n.DiskCacheHitWeight))
	}
	if !nonNegative(n.SharedCacheMultiplier) {
		errs = append(errs, fmt.Errorf("shared_cache_multiplier must be ≥ 0, got %v", n.SharedCacheMultiplier))
	}
	if !nonNegative(n.RouterTemperature) {
		errs = append(errs, fmt.Errorf("router_temperature must be ≥ 0, got %v", n.RouterTemperature))
	}
	if !nonNegative(n.RouterQueueThreshold) {
		errs = append(errs, fmt.Errorf("router_queue_threshold must be ≥ 0, got %v", n.RouterQueueThreshold))
	}
	if !nonNegative(n.DecodeActiveRequestWeight) {
		errs = append(errs, fmt.Errorf("decode_active_request_weight must be ≥ 0, got %v", n.DecodeActiveRequestWeight))
	}
	if n.MaxQueueLength <= 0 || n.MaxQueueLength > MaxQueueLengthCeiling {
		errs = append(errs, fmt.Errorf("max queue length must be in [1,%d], got %d", MaxQueueLengthCeiling, n.MaxQueueLength))
	}
	if _, err := ParseQueuePolicy(string(n.RouterQueuePolicy)); err != nil {
		errs = append(errs, err)
	}
	if _, err := ParseCostModel(string(n.RouterCost)); err != nil && n.RouterCost != "" { // "" is dynamo
		errs = append(errs, err)
	}
	if n.RouterCost == CostTTFT {
		errs = append(errs, n.TTFT.validate()...)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
}

// nonNegative is false for NaN and infinities as well as negatives.
func nonNegative(x float64) bool { return x >= 0 && !math.IsInf(x, 1) }

func inRange(x, lo, hi float64) bool { return x >= lo && x <= hi }
