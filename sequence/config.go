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
}

// DefaultConfig returns Dynamo's defaults.
func DefaultConfig() Config {
	return Config{
		TrackOutputBlocks: false,
		AssumeKVReuse:     true,
		ExpiryDuration:    DefaultExpiryDuration,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.ExpiryDuration <= 0 {
		return fmt.Errorf("sequence: expiry duration must be positive, got %s", c.ExpiryDuration)
	}
	return nil
}
