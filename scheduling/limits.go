package scheduling

import (
	"errors"
	"fmt"
)

// ErrLimit is wrapped when a configured bound refuses a request that is
// well formed (too many requests in flight).
var ErrLimit = errors.New("limit reached")

// Limits bound what one request may cost and how many may be in flight on
// one replica. 0 means no bound.
type Limits struct {
	// MaxPromptTokens bounds a prompt: its hashing, its fan-out payload and
	// its place in every worker's prefill load.
	MaxPromptTokens int
	// MaxRequestIDBytes bounds a request id, which every replica keeps in
	// memory while the request is active and gossips in every event.
	MaxRequestIDBytes int
	// MaxActiveRequests bounds the requests this replica routed that are
	// still active (not freed or expired): each costs memory on every
	// replica until freed or expired.
	MaxActiveRequests int
}

// Default bounds: a 1M-token prompt is far past any served context today;
// 256 bytes holds any UUID or trace id; 65,536 requests in flight per
// replica is ~300 MB of tracker state at 4k-token prompts on each peer.
const (
	DefaultMaxPromptTokens   = 1 << 20
	DefaultMaxRequestIDBytes = 256
	DefaultMaxActiveRequests = 1 << 16
)

// DefaultLimits returns the default bounds.
func DefaultLimits() Limits {
	return Limits{
		MaxPromptTokens:   DefaultMaxPromptTokens,
		MaxRequestIDBytes: DefaultMaxRequestIDBytes,
		MaxActiveRequests: DefaultMaxActiveRequests,
	}
}

// Validate rejects negative bounds.
func (l Limits) Validate() error {
	if l.MaxPromptTokens < 0 || l.MaxRequestIDBytes < 0 || l.MaxActiveRequests < 0 {
		return fmt.Errorf("limits must be >= 0 (0 = no bound), got %+v: %w", l, ErrInvalidConfig)
	}
	return nil
}

// CheckRequest refuses a request whose prompt or id is past the bounds
// (ErrInvalidInput: the client must change the request).
func (l Limits) CheckRequest(promptTokens int, requestID string) error {
	if l.MaxPromptTokens > 0 && promptTokens > l.MaxPromptTokens {
		return fmt.Errorf("prompt has %d tokens, limit %d (max-prompt-tokens): %w", promptTokens, l.MaxPromptTokens, ErrInvalidInput)
	}
	if l.MaxRequestIDBytes > 0 && len(requestID) > l.MaxRequestIDBytes {
		return fmt.Errorf("request_id has %d bytes, limit %d (max-request-id-bytes): %w", len(requestID), l.MaxRequestIDBytes, ErrInvalidInput)
	}
	return nil
}

// CheckAdmission refuses a new active request when active are already in
// flight (ErrLimit: the client may retry later).
func (l Limits) CheckAdmission(active int) error {
	if l.MaxActiveRequests > 0 && active >= l.MaxActiveRequests {
		return fmt.Errorf("%d requests in flight on this replica, limit %d (max-active-requests): %w", active, l.MaxActiveRequests, ErrLimit)
	}
	return nil
}
