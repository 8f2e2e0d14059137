package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/internal/loglimit"
)

// HeartbeatSource feeds decoded worker heartbeats to a handler. A plain
// subscription: heartbeats are periodic, so a late replica needs no
// history.
type HeartbeatSource struct {
	cfg       HeartbeatSourceConfig
	sub       *nats.Subscription
	received  atomic.Uint64
	malformed atomic.Uint64
	rejected  atomic.Uint64
	log       *slog.Logger
	limiter   loglimit.Limiter
	// refusals reports a refused worker when it starts being refused and
	// then at most once a minute: its heartbeats arrive every second.
	refusals loglimit.Keyed[uint64]

	mu     sync.Mutex // held around the handler, so Close can wait for it
	closed bool
}

// ReasonBlockSizeMismatch labels heartbeats refused because the worker's
// block size is not the router's.
const ReasonBlockSizeMismatch = "block_size_mismatch"

// refusalEvery is how often a worker still refused is reported again.
const refusalEvery = time.Minute

// HeartbeatSourceConfig configures heartbeat ingestion.
type HeartbeatSourceConfig struct {
	Subject string // DefaultWorkersSubject if empty
	Log     *slog.Logger
	// BlockSize, when non-zero, is the router's block size: a heartbeat
	// announcing another (non-zero) one is refused, since its KV events
	// would hash blocks the router's prompts never match.
	BlockSize int
	// OnReject, when set, is told every refused heartbeat and why
	// (ReasonBlockSizeMismatch): for the rejected-workers metric, and to
	// remove a worker that was registered before it changed.
	OnReject func(hb events.Heartbeat, reason string)
}

// StartHeartbeatSource subscribes to subject (DefaultWorkersSubject if
// empty). The handler runs on the subscription's goroutine, one
// heartbeat at a time, and must not block for long. Malformed
// heartbeats are dropped and counted.
func StartHeartbeatSource(nc *nats.Conn, subject string, log *slog.Logger, handler func(events.Heartbeat)) (*HeartbeatSource, error) {
	return StartHeartbeatSourceWith(nc, HeartbeatSourceConfig{Subject: subject, Log: log}, handler)
}

// StartHeartbeatSourceWith is StartHeartbeatSource with the checks of cfg:
// a refused heartbeat is counted (Stats, OnReject) and logged at ERROR
// the first time its worker is refused, then at WARN at most once a
// minute per worker with the count of the refusals in between, never
// every second.
func StartHeartbeatSourceWith(nc *nats.Conn, cfg HeartbeatSourceConfig, handler func(events.Heartbeat)) (*HeartbeatSource, error) {
	if handler == nil {
		return nil, errors.New("heartbeat source: handler is required")
	}
	if cfg.Subject == "" {
		cfg.Subject = DefaultWorkersSubject
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	h := &HeartbeatSource{cfg: cfg, log: cfg.Log.With("component", "natsbus"), limiter: loglimit.Limiter{Every: time.Second},
		refusals: loglimit.Keyed[uint64]{Every: refusalEvery}}
	sub, err := nc.Subscribe(cfg.Subject, func(m *nats.Msg) {
		h.received.Add(1)
		hb, err := events.DecodeHeartbeat(m.Data)
		if err != nil {
			h.malformed.Add(1)
			if ok, suppressed := h.limiter.Allow(time.Now()); ok {
				h.log.Warn("dropped malformed heartbeat", "reason", "malformed", "subject", m.Subject, "err", err, "suppressed", suppressed)
			}
			return
		}
		if h.refuse(hb) {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.closed {
			handler(hb)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", cfg.Subject, err)
	}
	h.sub = sub
	awaitSubscribed(nc, cfg.Subject, h.log)
	return h, nil
}

// refuse applies the configured checks; a refused heartbeat is counted,
// reported and logged (first refusal of a worker at ERROR, repeats at
// WARN once a minute).
func (h *HeartbeatSource) refuse(hb events.Heartbeat) bool {
	if h.cfg.BlockSize == 0 || hb.BlockSize == 0 || int(hb.BlockSize) == h.cfg.BlockSize {
		if h.cfg.BlockSize != 0 {
			h.refusals.Forget(hb.WorkerID) // fixed: a later mismatch is news again
		}
		return false
	}
	h.rejected.Add(1)
	if h.cfg.OnReject != nil {
		h.cfg.OnReject(hb, ReasonBlockSizeMismatch)
	}
	ok, first, suppressed := h.refusals.Allow(hb.WorkerID, time.Now())
	if !ok {
		return true
	}
	level, msg := slog.LevelWarn, "worker still rejected: block size differs from the router's"
	if first {
		level, msg = slog.LevelError, "worker rejected: block size differs from the router's"
	}
	h.log.Log(context.Background(), level, msg, "reason", ReasonBlockSizeMismatch, "worker", hb.WorkerID,
		"worker_block_size", hb.BlockSize, "router_block_size", h.cfg.BlockSize, "refused_since_last_line", suppressed)
	return true
}

// Rejected is how many heartbeats the configured checks refused.
func (h *HeartbeatSource) Rejected() uint64 { return h.rejected.Load() }

// Stats returns (received, malformed).
func (h *HeartbeatSource) Stats() (uint64, uint64) { return h.received.Load(), h.malformed.Load() }

// Close unsubscribes. When it returns the handler is not running and
// will not be called again.
func (h *HeartbeatSource) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	// closed already keeps the handler from running; Unsubscribe fails only
	// when the connection is closed, which ended the subscription too.
	_ = h.sub.Unsubscribe()
}
