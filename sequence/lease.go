package sequence

import (
	"fmt"
	"time"
)

// LeasePolicy sizes the lease of a request this replica routed: how long
// its load stays counted without news of it. A client that routes and
// never frees (a crash, a bug, an attacker) then holds its load for about
// as long as the answer it asked for could take, not for the whole
// ExpiryDuration.
//
//	lease = min(ExpiryDuration, max(Min, ISL·PrefillTokenTime + output·DecodeTokenTime))
//
// where output is the request's expected output tokens, or
// DefaultOutputTokens when it names none. Prefill completion restarts the
// lease with the output term alone (the prompt is done), and a renewal
// (the proxy, while an answer streams) grants at least Min from then on.
// Expiry frees the request like a free. The zero policy (DecodeTokenTime
// 0) leases nothing: requests expire ExpiryDuration after they started.
type LeasePolicy struct {
	// PrefillTokenTime is the time allowed per prompt token.
	PrefillTokenTime time.Duration
	// DecodeTokenTime is the time allowed per output token; 0 turns
	// leases off.
	DecodeTokenTime time.Duration
	// DefaultOutputTokens stands for a request that names no expected
	// output (max_tokens, expected_output_tokens).
	DefaultOutputTokens uint64
	// Min is the shortest lease, and what a renewal grants.
	Min time.Duration
}

// Default lease figures: generous for a loaded engine (50 ms per output
// token is a slow decode; 1 ms per prompt token a slow prefill), so a
// request that is being served outlives its lease only when it produces
// more than its expected output and nobody renews it.
const (
	DefaultLeasePrefillTokenTime    = time.Millisecond
	DefaultLeaseDecodeTokenTime     = 50 * time.Millisecond
	DefaultLeaseDefaultOutputTokens = 4096
	DefaultLeaseMin                 = time.Minute
)

// DefaultLeasePolicy returns the default lease figures.
func DefaultLeasePolicy() LeasePolicy {
	return LeasePolicy{
		PrefillTokenTime:    DefaultLeasePrefillTokenTime,
		DecodeTokenTime:     DefaultLeaseDecodeTokenTime,
		DefaultOutputTokens: DefaultLeaseDefaultOutputTokens,
		Min:                 DefaultLeaseMin,
	}
}

// Enabled reports whether requests get leases.
func (p LeasePolicy) Enabled() bool { return p.DecodeTokenTime > 0 }

// Validate rejects negative figures and a lease without a minimum.
func (p LeasePolicy) Validate() error {
	if p.PrefillTokenTime < 0 || p.DecodeTokenTime < 0 || p.Min < 0 {
		return fmt.Errorf("sequence: lease times must be >= 0, got %+v", p)
	}
	if p.Enabled() && p.Min <= 0 {
		return fmt.Errorf("sequence: a lease needs a positive minimum (request-lease-min), got %s", p.Min)
	}
	return nil
}

// For is the lease of a new request with isl prompt tokens and expected
// output tokens (0: unknown), capped at ceiling (the ExpiryDuration).
// 0 when leases are off.
func (p LeasePolicy) For(isl, output uint64, ceiling time.Duration) time.Duration {
	if !p.Enabled() {
		return 0
	}
	prefill, decode := mulSat(p.PrefillTokenTime, isl), mulSat(p.DecodeTokenTime, p.output(output))
	sum := prefill + decode
	if sum < prefill {
		sum = maxDuration
	}
	return p.clamp(sum, ceiling)
}

// AfterPrefill is the lease a request gets when its prefill completes:
// the output term alone.
func (p LeasePolicy) AfterPrefill(output uint64, ceiling time.Duration) time.Duration {
	if !p.Enabled() {
		return 0
	}
	return p.clamp(mulSat(p.DecodeTokenTime, p.output(output)), ceiling)
}

// Renewal is what a renewal grants from its time on.
func (p LeasePolicy) Renewal(ceiling time.Duration) time.Duration {
	if !p.Enabled() {
		return 0
	}
	return p.clamp(p.Min, ceiling)
}

func (p LeasePolicy) output(n uint64) uint64 {
	if n == 0 {
		return p.DefaultOutputTokens
	}
	return n
}

func (p LeasePolicy) clamp(d, ceiling time.Duration) time.Duration {
	d = max(d, p.Min)
	if ceiling > 0 {
		d = min(d, ceiling)
	}
	return d
}

const maxDuration = time.Duration(1<<63 - 1)

// mulSat is d·n, saturating instead of overflowing (a client may name
// 2^64−1 output tokens).
func mulSat(d time.Duration, n uint64) time.Duration {
	if d <= 0 || n == 0 {
		return 0
	}
	if n > uint64(maxDuration/d) {
		return maxDuration
	}
	d *= time.Duration(n)
	return d
}
