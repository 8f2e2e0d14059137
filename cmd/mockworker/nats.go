package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/mockengine"
)

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
	p := mockengine.NewNATSPublisher(conn, o.kvEventsSubject, o.workersSubject)
	closeFn := func() {
		if err := conn.FlushTimeout(2 * time.Second); err != nil {
			log.Warn("nats flush on shutdown failed", "err", err)
		}
		conn.Close()
	}
	return p, closeFn, nil
}
