package natsbus

import (
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
	sub       *nats.Subscription
	received  atomic.Uint64
	malformed atomic.Uint64
	log       *slog.Logger
	limiter   loglimit.Limiter

	mu     sync.Mutex // held around the handler, so Close can wait for it
	closed bool
}

// StartHeartbeatSource subscribes to subject (DefaultWorkersSubject if
// empty). The handler runs on the subscription's goroutine, one
// heartbeat at a time, and must not block for long. Malformed
// heartbeats are dropped and counted.
func StartHeartbeatSource(nc *nats.Conn, subject string, log *slog.Logger, handler func(events.Heartbeat)) (*HeartbeatSource, error) {
	if handler == nil {
		return nil, errors.New("heartbeat source: handler is required")
	}
	if subject == "" {
		subject = DefaultWorkersSubject
	}
	if log == nil {
		log = slog.Default()
	}
	h := &HeartbeatSource{log: log.With("component", "natsbus"), limiter: loglimit.Limiter{Every: time.Second}}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		h.received.Add(1)
		hb, err := events.DecodeHeartbeat(m.Data)
		if err != nil {
			h.malformed.Add(1)
			if ok, suppressed := h.limiter.Allow(time.Now()); ok {
				h.log.Debug("dropped malformed heartbeat", "subject", m.Subject, "err", err, "suppressed", suppressed)
			}
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.closed {
			handler(hb)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	h.sub = sub
	awaitSubscribed(nc, subject, h.log)
	return h, nil
}

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
