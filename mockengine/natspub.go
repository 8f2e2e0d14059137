package mockengine

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/natsbus"
)

// NATSPublisher adapts natsbus's engine-side Publisher (Dynamo RouterEvent
// JSON on core NATS; a router with JetStream captures the events subject
// in its stream) to the engine's Publisher interface.
type NATSPublisher struct{ bus *natsbus.Publisher }

// NewNATSPublisher publishes on conn; the caller owns the connection.
func NewNATSPublisher(conn *nats.Conn, eventsSubject, workersSubject string) *NATSPublisher {
	return &NATSPublisher{bus: natsbus.NewPublisher(conn, natsbus.PublisherConfig{
		EventsSubject: eventsSubject, WorkersSubject: workersSubject,
	})}
}

// PublishEvent implements Publisher. Core NATS only buffers, so ctx is
// honoured if already done but never blocks.
func (p *NATSPublisher) PublishEvent(ctx context.Context, ev *kv.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.bus.PublishEvent(ev)
}

// PublishHeartbeat implements Publisher.
func (p *NATSPublisher) PublishHeartbeat(ctx context.Context, hb Heartbeat) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.bus.PublishHeartbeat(events.Heartbeat{
		WorkerID: uint64(hb.WorkerID), URL: hb.URL, DataParallelStartRank: hb.DataParallelStartRank,
		DataParallelSize: uint32(hb.DataParallelSize), BlockSize: uint32(hb.BlockSize),
		TotalKVBlocks: uint64(hb.TotalKVBlocks), ModelName: hb.ModelName,
		MaxNumBatchedTokens: uint64(hb.MaxNumBatchedTokens), KVEventsEndpoint: hb.KVEventsEndpoint,
		ReplayEndpoint: hb.ReplayEndpoint, Role: hb.Role.String(),
	})
}

// Flush waits until NATS has everything published so far.
func (p *NATSPublisher) Flush(ctx context.Context) error { return p.bus.Flush(ctx) }
