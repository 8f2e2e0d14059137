package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/mockengine"
)

// connectPublisher returns the worker's publisher: with --kv-events zmq a
// ZMQ publisher (heartbeats forwarded to NATS when --nats-url is set),
// else NATS when --nats-url is set, else nil (nothing is published). The
// close function flushes what is buffered and disconnects.
func connectPublisher(ctx context.Context, o options, log *slog.Logger) (mockengine.Publisher, func(), error) {
	if o.kvEvents == "zmq" {
		return connectZMQPublisher(ctx, o, log)
	}
	return connectNATSPublisher(ctx, o, log)
}

// connectZMQPublisher binds the vLLM-style sockets. Heartbeats still need
// NATS: they announce the ZMQ endpoints to routers.
func connectZMQPublisher(ctx context.Context, o options, log *slog.Logger) (mockengine.Publisher, func(), error) {
	var heartbeats mockengine.Publisher
	closeNATS := func() {}
	if o.natsURL != "" {
		p, closeFn, err := connectNATSPublisher(ctx, o, log)
		if err != nil {
			return nil, nil, err
		}
		heartbeats, closeNATS = p, closeFn
	} else {
		log.Info("no --nats-url: heartbeats are not published; routers must be given the ZMQ endpoints")
	}
	zp, err := mockengine.NewZMQPublisher(mockengine.ZMQPublisherConfig{
		Endpoint: o.zmqEndpoint, ReplayEndpoint: o.zmqReplayEndpoint, DPSize: o.server.Engine.DPSize,
		Encoding: o.zmqEncoding, BlockSize: o.server.Engine.BlockSize, Heartbeats: heartbeats, Logger: log,
		Wire: o.zmqWire,
	})
	if err != nil {
		closeNATS()
		return nil, nil, fmt.Errorf("zmq kv event publisher: %w", err)
	}
	log.Info("publishing kv events over zmq", "endpoint", zp.Endpoint(), "replay_endpoint", zp.ReplayEndpoint(),
		"encoding", o.zmqEncoding)
	return zp, func() {
		zp.Close()
		closeNATS()
	}, nil
}

// connectNATSPublisher connects to NATS when --nats-url is set.
func connectNATSPublisher(ctx context.Context, o options, log *slog.Logger) (mockengine.Publisher, func(), error) {
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
