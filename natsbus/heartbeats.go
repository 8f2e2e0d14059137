package natsbus

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/events"
)

// HeartbeatSource feeds decoded worker heartbeats to a handler. A plain
// subscription: heartbeats are periodic, so a late replica needs no
// history.
type HeartbeatSource struct {
	sub       *nats.Subscription
	received  atomic.Uint64
	malformed atomic.Uint64
	log       *slog.Logger
	limiter   logLimiter
}

// StartHeartbeatSource subscribes to subject. The handler runs on the
// subscription's goroutine and must not block for long.
func StartHeartbeatSource(nc *nats.Conn, subject string, log *slog.Logger, handler func(events.Heartbeat)) (*HeartbeatSource, error) {
	if log == nil {
		log = slog.Default()
	}
	h := &HeartbeatSource{log: log, limiter: logLimiter{every: time.Second}}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		h.received.Add(1)
		hb, err := events.DecodeHeartbeat(m.Data)
		if err != nil {
			h.malformed.Add(1)
			if ok, suppressed := h.limiter.allow(time.Now()); ok {
				h.log.Debug("dropped malformed heartbeat", "err", err, "suppressed", suppressed)
			}
			return
		}
		handler(hb)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	h.sub = sub
	return h, nil
}

// Stats returns (received, malformed).
func (h *HeartbeatSource) Stats() (uint64, uint64) { return h.received.Load(), h.malformed.Load() }

// Close unsubscribes.
func (h *HeartbeatSource) Close() { _ = h.sub.Unsubscribe() }
