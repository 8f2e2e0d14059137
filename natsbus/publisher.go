package natsbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/kv"
)

// PublisherConfig configures what an engine publishes where.
type PublisherConfig struct {
	// EventsSubject is the KV-event subject (DefaultEventsSubject if
	// empty); protobuf goes to EventsSubject+".pb".
	EventsSubject string
	// WorkersSubject is the heartbeat subject (DefaultWorkersSubject if
	// empty).
	WorkersSubject string
	// Protobuf publishes KvEventBatch messages instead of Dynamo's
	// RouterEvent JSON.
	Protobuf bool
}

// Publisher is an engine's side of the bus: it publishes KV events and
// heartbeats on core NATS. A router with JetStream captures the events
// subject in its stream, so the engine needs no JetStream itself. Safe
// for concurrent use; the caller owns the connection.
type Publisher struct {
	nc  *nats.Conn
	cfg PublisherConfig

	mu  sync.Mutex
	buf []byte // JSON scratch: nats copies the payload before Publish returns
}

// NewPublisher publishes on nc.
func NewPublisher(nc *nats.Conn, cfg PublisherConfig) *Publisher {
	if cfg.EventsSubject == "" {
		cfg.EventsSubject = DefaultEventsSubject
	}
	if cfg.WorkersSubject == "" {
		cfg.WorkersSubject = DefaultWorkersSubject
	}
	return &Publisher{nc: nc, cfg: cfg}
}

// PublishEvent publishes one event.
func (p *Publisher) PublishEvent(ev *kv.Event) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("publish kv event %d of %s: %w", ev.EventID, ev.Worker, err)
	}
	if p.cfg.Protobuf {
		return p.publishProto([]kv.Event{*ev})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = events.AppendRouterEventJSON(p.buf[:0], ev)
	if err := p.nc.Publish(p.cfg.EventsSubject, p.buf); err != nil {
		return fmt.Errorf("publish kv event %d of %s: %w", ev.EventID, ev.Worker, err)
	}
	return nil
}

// PublishEvents publishes evs as one message (a JSON array or one
// KvEventBatch), so the router applies them together and in order.
func (p *Publisher) PublishEvents(evs []kv.Event) error {
	if len(evs) == 0 {
		return nil
	}
	for i := range evs {
		if err := evs[i].Validate(); err != nil {
			return fmt.Errorf("publish kv event batch, entry %d: %w", i, err)
		}
	}
	if p.cfg.Protobuf {
		return p.publishProto(evs)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf[:0], '[')
	for i := range evs {
		if i > 0 {
			p.buf = append(p.buf, ',')
		}
		p.buf = events.AppendRouterEventJSON(p.buf, &evs[i])
	}
	p.buf = append(p.buf, ']')
	if err := p.nc.Publish(p.cfg.EventsSubject, p.buf); err != nil {
		return fmt.Errorf("publish %d kv events: %w", len(evs), err)
	}
	return nil
}

func (p *Publisher) publishProto(evs []kv.Event) error {
	data, err := events.EncodeProtoBatch(evs)
	if err != nil {
		return fmt.Errorf("publish kv events: %w", err)
	}
	if err := p.nc.Publish(p.cfg.EventsSubject+ProtobufSuffix, data); err != nil {
		return fmt.Errorf("publish %d kv events (protobuf): %w", len(evs), err)
	}
	return nil
}

// PublishHeartbeat announces the worker.
func (p *Publisher) PublishHeartbeat(hb events.Heartbeat) error {
	if hb.DataParallelSize == 0 {
		hb.DataParallelSize = 1
	}
	data, err := events.EncodeHeartbeat(hb)
	if err != nil {
		return fmt.Errorf("publish heartbeat of worker %d: %w", hb.WorkerID, err)
	}
	if err := p.nc.Publish(p.cfg.WorkersSubject, data); err != nil {
		return fmt.Errorf("publish heartbeat of worker %d: %w", hb.WorkerID, err)
	}
	return nil
}

// ErrNotConnected is returned by Flush while the connection is down.
var ErrNotConnected = errors.New("NATS connection is not connected")

// defaultFlushTimeout bounds a Flush whose context has no deadline (nats
// refuses those).
const defaultFlushTimeout = 10 * time.Second

// Flush waits until the server has received everything published so far.
func (p *Publisher) Flush(ctx context.Context) error {
	if !p.nc.IsConnected() {
		return ErrNotConnected
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultFlushTimeout)
		defer cancel()
	}
	if err := p.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("flush NATS: %w", err)
	}
	return nil
}
