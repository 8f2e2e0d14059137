package trust

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of the trust rules (docs/index-trust.md explains each).
const (
	// DefaultGapGrace: an event-id gap neither replayed nor followed by a
	// clear within this long makes the rank untrusted. A ZMQ replay takes
	// at most its timeout (5 s by default); NATS has no replay, so only a
	// clear can repair a gap there.
	DefaultGapGrace = 5 * time.Second
	// DefaultStaleAfter: a rank sent work that makes its engine store
	// blocks this long ago, with no KV event from it since, is untrusted
	// (its stream is presumed dead). An engine announces a stored block
	// within a step of computing it, so 30 s is far past any batch.
	DefaultStaleAfter = 30 * time.Second
	// DefaultRefusedWindow and DefaultRefusedUntrusted: any refused event
	// degrades a rank for RefusedWindow; RefusedUntrusted of them within
	// one window make it untrusted.
	DefaultRefusedWindow    = 60 * time.Second
	DefaultRefusedUntrusted = 16
	// Parity: a window of DefaultParityWindow requests the router
	// predicted hits for is judged by its false-hit fraction (predicted
	// cached tokens the engine did not confirm, over predicted cached
	// tokens): above ParityUntrusted untrusted, above ParityDegraded
	// degraded, at most ParityClean restores the rank.
	DefaultParityWindow    = 32
	DefaultParityDegraded  = 0.10
	DefaultParityUntrusted = 0.50
	DefaultParityClean     = 0.02
	// DefaultFallbackTTL is how long a routed prompt's blocks are
	// predicted cached on a rank that is not exact (approximate mode's
	// rule, Dynamo's router_ttl_secs default), when
	// router-predicted-ttl-secs does not set it.
	DefaultFallbackTTL = 120 * time.Second
)

// Config holds the thresholds. The zero value is not usable: start from
// DefaultConfig.
type Config struct {
	// Enabled: when false every rank is exact and nothing is tracked.
	Enabled          bool
	GapGrace         time.Duration
	StaleAfter       time.Duration
	RefusedWindow    time.Duration
	RefusedUntrusted int
	ParityWindow     int
	ParityDegraded   float64
	ParityUntrusted  float64
	ParityClean      float64
	FallbackTTL      time.Duration
}

// DefaultConfig returns the documented defaults, enabled.
func DefaultConfig() Config {
	return Config{
		Enabled: true, GapGrace: DefaultGapGrace, StaleAfter: DefaultStaleAfter,
		RefusedWindow: DefaultRefusedWindow, RefusedUntrusted: DefaultRefusedUntrusted,
		ParityWindow: DefaultParityWindow, ParityDegraded: DefaultParityDegraded,
		ParityUntrusted: DefaultParityUntrusted, ParityClean: DefaultParityClean,
		FallbackTTL: DefaultFallbackTTL,
	}
}

// Validate rejects thresholds that cannot work together.
func (c Config) Validate() error {
	var errs []error
	if c.GapGrace <= 0 {
		errs = append(errs, fmt.Errorf("index-trust-gap-grace %s must be positive", c.GapGrace))
	}
	if c.StaleAfter <= 0 {
		errs = append(errs, fmt.Errorf("index-trust-stale-after %s must be positive", c.StaleAfter))
	}
	if c.RefusedWindow <= 0 {
		errs = append(errs, fmt.Errorf("index-trust-refused-window %s must be positive", c.RefusedWindow))
	}
	if c.RefusedUntrusted < 1 {
		errs = append(errs, fmt.Errorf("index-trust-refused-untrusted %d must be at least 1", c.RefusedUntrusted))
	}
	if c.ParityWindow < 1 {
		errs = append(errs, fmt.Errorf("index-trust-parity-window %d must be at least 1", c.ParityWindow))
	}
	if !(0 <= c.ParityClean && c.ParityClean < c.ParityDegraded && c.ParityDegraded <= c.ParityUntrusted && c.ParityUntrusted <= 1) {
		errs = append(errs, fmt.Errorf("index trust parity thresholds must satisfy 0 <= clean (%g) < degraded (%g) <= untrusted (%g) <= 1",
			c.ParityClean, c.ParityDegraded, c.ParityUntrusted))
	}
	if c.FallbackTTL <= 0 {
		errs = append(errs, fmt.Errorf("index-trust-fallback-ttl %s must be positive", c.FallbackTTL))
	}
	return errors.Join(errs...)
}
