package mockengine

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/kv"
)

// NATSPublisher publishes a worker's KV events (Dynamo RouterEvent JSON)
// and heartbeats on core NATS subjects; a router with JetStream captures
// the events subject in its stream.
type NATSPublisher struct {
	conn           *nats.Conn
	eventsSubject  string
	workersSubject string
}

// NewNATSPublisher publishes on conn; the caller owns the connection.
func NewNATSPublisher(conn *nats.Conn, eventsSubject, workersSubject string) *NATSPublisher {
	return &NATSPublisher{conn: conn, eventsSubject: eventsSubject, workersSubject: workersSubject}
}

// PublishEvent implements Publisher. Core NATS only buffers, so ctx is
// honoured if already done but never blocks.
func (p *NATSPublisher) PublishEvent(ctx context.Context, ev *kv.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := events.EncodeRouterEventJSON(ev)
	if err != nil {
		return fmt.Errorf("encode kv event %d of rank %d: %w", ev.EventID, ev.Worker.DpRank, err)
	}
	if err := p.conn.Publish(p.eventsSubject, data); err != nil {
		return fmt.Errorf("publish kv event %d of rank %d: %w", ev.EventID, ev.Worker.DpRank, err)
	}
	return nil
}

// PublishHeartbeat implements Publisher.
func (p *NATSPublisher) PublishHeartbeat(ctx context.Context, hb Heartbeat) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := events.EncodeHeartbeat(events.Heartbeat{
		WorkerID: uint64(hb.WorkerID), URL: hb.URL, DataParallelStartRank: hb.DataParallelStartRank,
		DataParallelSize: uint32(hb.DataParallelSize), BlockSize: uint32(hb.BlockSize),
		TotalKVBlocks: uint64(hb.TotalKVBlocks), ModelName: hb.ModelName,
		MaxNumBatchedTokens: uint64(hb.MaxNumBatchedTokens), KVEventsEndpoint: hb.KVEventsEndpoint,
		ReplayEndpoint: hb.ReplayEndpoint,
	})
	if err != nil {
		return err
	}
	if err := p.conn.Publish(p.workersSubject, data); err != nil {
		return fmt.Errorf("publish heartbeat: %w", err)
	}
	return nil
}

// Flush waits until NATS has everything published so far.
func (p *NATSPublisher) Flush() error { return p.conn.Flush() }
