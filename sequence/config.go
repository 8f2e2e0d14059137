package sequence

import (
	"fmt"
	"time"
)

// DefaultExpiryDuration is Dynamo's EXPIRY_DURATION: a request still active
// after an hour is assumed to have lost its Free (a crashed client, a
// dropped gossip message) and is expired by the sweep. It is a leak guard,
// not an SLA: long agentic requests legitimately run for many minutes.
const DefaultExpiryDuration = 3600 * time.Second

// Config controls what one rank's tracker counts.
type Config struct {
	// TrackOutputBlocks (router_track_output_blocks, default false) lets
	// AddOutputBlock grow a request by placeholder blocks as tokens are
	// generated, so decode-heavy requests weigh on their worker's load.
	TrackOutputBlocks bool

	// AssumeKVReuse (router_assume_kv_reuse, default true) deduplicates
	// prompt blocks shared by several active requests, because the engine
	// holds a shared prefix once. With false every request's blocks count
	// separately, as if the engine never reused KV across requests.
	AssumeKVReuse bool

	// ExpiryDuration is how long a request may stay active before
	// ExpireStale frees it. Default DefaultExpiryDuration.
	ExpiryDuration time.Duration

	// Stride (router_active_sequence_stride, default 1) keeps one
	// sequence hash per Stride prompt blocks: Request.SequenceHashes and
	// load queries carry Sample(hashes, Stride), and each kept hash stands
	// for the Stride blocks it ends. Replicas gossip every request's
	// hashes to every peer, so a stride of 4 cuts that traffic and the
	// peers' per-block work fourfold, at the price of deduplicating shared
	// prefixes in steps of Stride blocks. Every replica must use the same
	// value. 0 means 1.
	Stride int

	// Lease sizes the leases of the requests this replica routed (its
	// owner passes them in Request.Lease); ExpiryDuration caps them.
	Lease LeasePolicy
}

// SweepInterval is how often the owner should call ExpireStale: every
// check (Dynamo's 30 s), or a quarter of the expiry when that is shorter,
// so a short expiry set by the user frees a vanished client's request
// close to on time rather than up to a check later.
//
// With leases, also at least every half lease minimum, so an expired
// lease is freed within 1.5 times its length.
func (c Config) SweepInterval(check time.Duration) time.Duration {
	every := min(check, c.ExpiryDuration/4)
	if c.Lease.Enabled() {
		every = min(every, c.Lease.Min/2)
	}
	return every
}

// EffectiveStride is Stride with 0 read as 1.
func (c Config) EffectiveStride() int { return max(c.Stride, 1) }

// MaxStride bounds Stride; beyond it a prompt keeps almost no hashes.
const MaxStride = 1024

// DefaultConfig returns Dynamo's defaults.
func DefaultConfig() Config {
	return Config{
		TrackOutputBlocks: false,
		AssumeKVReuse:     true,
		ExpiryDuration:    DefaultExpiryDuration,
		Stride:            1,
		Lease:             DefaultLeasePolicy(),
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.ExpiryDuration <= 0 {
		return fmt.Errorf("sequence: expiry duration must be positive, got %s", c.ExpiryDuration)
	}
	if err := c.Lease.Validate(); err != nil {
		return err
	}
	if c.Stride < 0 || c.Stride > MaxStride {
		return fmt.Errorf("sequence: stride must be in 1..%d, got %d", MaxStride, c.Stride)
	}
	return nil
}
