package scheduling

import (
	"errors"
	"fmt"
)

// ErrLimit is wrapped when a configured bound refuses a request that is
// well formed (too many requests in flight).
var ErrLimit = errors.New("limit reached")

// ErrClientLimit is wrapped when one client's own bound refuses its
// request; it matches ErrLimit too.
var ErrClientLimit = fmt.Errorf("client %w", ErrLimit)

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
	// MaxActiveRequestsPerClient bounds the active requests of one
	// client (its bearer token, else its address) on this replica, so
	// one client that routes and never frees fills its own share, not
	// the replica.
	MaxActiveRequestsPerClient int
}

// Default bounds: a 1M-token prompt is far past any served context today;
// 256 bytes holds any UUID or trace id; 65,536 requests in flight per
// replica is ~300 MB of tracker state at 4k-token prompts on each peer.
const (
	DefaultMaxPromptTokens   = 1 << 20
	DefaultMaxRequestIDBytes = 256
	DefaultMaxActiveRequests = 1 << 16
	// DefaultMaxActiveRequestsPerClient is an eighth of the replica's
	// bound: a gateway that sends every client's requests under one
	// token must raise it.
	DefaultMaxActiveRequestsPerClient = DefaultMaxActiveRequests / 8
)

// DefaultLimits returns the default bounds.
func DefaultLimits() Limits {
	return Limits{
		MaxPromptTokens:   DefaultMaxPromptTokens,
		MaxRequestIDBytes: DefaultMaxRequestIDBytes,
		MaxActiveRequests: DefaultMaxActiveRequests,

		MaxActiveRequestsPerClient: DefaultMaxActiveRequestsPerClient,
	}
}

// Validate rejects negative bounds.
func (l Limits) Validate() error {
	if l.MaxPromptTokens < 0 || l.MaxRequestIDBytes < 0 || l.MaxActiveRequests < 0 || l.MaxActiveRequestsPerClient < 0 {
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

// CheckClient refuses a client's new active request when it already holds
// active of them (ErrClientLimit). An unnamed client ("") is not bounded
// here.
func (l Limits) CheckClient(client string, active int) error {
	if l.MaxActiveRequestsPerClient > 0 && client != "" && active >= l.MaxActiveRequestsPerClient {
		return fmt.Errorf("this client holds %d requests in flight on this replica, limit %d per client (max-active-requests-per-client; free finished requests): %w",
			active, l.MaxActiveRequestsPerClient, ErrClientLimit)
	}
	return nil
}

// SaturatedBy reports whether one client's active requests have reached
// the per-client bound (its further routes are refused).
func (l Limits) SaturatedBy(active int) bool {
	return l.MaxActiveRequestsPerClient > 0 && active >= l.MaxActiveRequestsPerClient
}
