package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
)

// natsPublisher publishes the worker's KV events and heartbeats on core
// NATS subjects (a router with JetStream captures the events subject in
// its stream).
type natsPublisher struct {
	conn            *nats.Conn
	eventsSubject   string
	workersSubject  string
	flushOnShutdown time.Duration
}

// connectPublisher connects to NATS when --nats-url is set. Without it the
// worker publishes nothing and the returned publisher is nil. The close
// function flushes what is buffered and disconnects.
func connectPublisher(ctx context.Context, o options, log *slog.Logger) (mockengine.Publisher, func(), error) {
	if o.natsURL == "" {
		log.Info("no --nats-url: KV events and heartbeats are not published")
		return nil, func() {}, nil
	}
	conn, err := nats.Connect(o.natsURL,
		nats.Name(fmt.Sprintf("mockworker-%d", o.workerID)),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("nats disconnected", "err", err) }),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrl()) }),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to nats at %s: %w", o.natsURL, err)
	}
	if ctx.Err() != nil {
		conn.Close()
		return nil, nil, ctx.Err()
	}
	p := &natsPublisher{conn: conn, eventsSubject: o.kvEventsSubject, workersSubject: o.workersSubject, flushOnShutdown: 2 * time.Second}
	closeFn := func() {
		if err := conn.FlushTimeout(p.flushOnShutdown); err != nil {
			log.Warn("nats flush on shutdown failed", "err", err)
		}
		conn.Close()
	}
	return p, closeFn, nil
}

// PublishEvent implements mockengine.Publisher. Core NATS publishing only
// buffers, so ctx is not needed for blocking; it is honoured if already
// done.
func (p *natsPublisher) PublishEvent(ctx context.Context, ev *kv.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := encodeRouterEvent(ev)
	if err != nil {
		return err
	}
	if err := p.conn.Publish(p.eventsSubject, data); err != nil {
		return fmt.Errorf("publish kv event %d of rank %d: %w", ev.EventID, ev.Worker.DpRank, err)
	}
	return nil
}

// PublishHeartbeat implements mockengine.Publisher.
func (p *natsPublisher) PublishHeartbeat(ctx context.Context, hb mockengine.Heartbeat) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := encodeHeartbeat(hb)
	if err != nil {
		return fmt.Errorf("encode heartbeat: %w", err)
	}
	if err := p.conn.Publish(p.workersSubject, data); err != nil {
		return fmt.Errorf("publish heartbeat: %w", err)
	}
	return nil
}
