package scheduling

import "fmt"

// Override is Dynamo's per-request router_config_override: each non-nil
// field replaces the configured value for one request.
type Override struct {
	// OverlapScoreWeight is deprecated: it sets PrefillLoadScale and, when
	// 0, OverlapScoreCredit = 0, overriding both new fields of this
	// override.
	OverlapScoreWeight *float64
	RouterTemperature  *float64
	OverlapScoreCredit *float64
	PrefillLoadScale   *float64
	TrackPrefillTokens *bool
	AssumeKVReuse      *bool
	// SharedCacheMultiplier is RouterConfigOverride.shared_cache_multiplier.
	SharedCacheMultiplier *float64
}

// Validate checks the override's own ranges (Dynamo validates the credit
// of an override on deserialisation; we check every float it can set).
func (o *Override) Validate() error {
	if o == nil {
		return nil
	}
	base := DefaultConfig()
	if err := base.WithOverride(o).Validate(); err != nil {
		return fmt.Errorf("router config override: %w", err)
	}
	return nil
}

// WithOverride returns c with o applied, following Dynamo: the base
// config's own deprecated weight is migrated first, then the override's
// fields replace the base, with the override's deprecated weight winning
// over its own credit and scale. The result has OverlapScoreWeight nil. A
// nil o returns c normalised.
func (c Config) WithOverride(o *Override) Config {
	c = c.Normalized()
	if o == nil {
		return c
	}
	credit, scale := o.OverlapScoreCredit, o.PrefillLoadScale
	if o.OverlapScoreWeight != nil {
		w := *o.OverlapScoreWeight
		scale = &w
		if w == 0 {
			zero := 0.0
			credit = &zero
		}
	}
	if credit != nil {
		c.OverlapScoreCredit = *credit
	}
	if scale != nil {
		c.PrefillLoadScale = *scale
	}
	if o.RouterTemperature != nil {
		c.RouterTemperature = *o.RouterTemperature
	}
	if o.TrackPrefillTokens != nil {
		c.TrackPrefillTokens = *o.TrackPrefillTokens
	}
	if o.AssumeKVReuse != nil {
		c.AssumeKVReuse = *o.AssumeKVReuse
	}
	if o.SharedCacheMultiplier != nil {
		c.SharedCacheMultiplier = *o.SharedCacheMultiplier
	}
	return c
}
