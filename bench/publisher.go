package bench

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
)

// natsPublisher carries an in-process mock worker's KV events (Dynamo
// RouterEvent JSON) and heartbeats to the router over NATS, as the
// mockworker command does.
type natsPublisher struct {
	conn           *nats.Conn
	eventsSubject  string
	workersSubject string
}

// PublishEvent implements mockengine.Publisher.
func (p *natsPublisher) PublishEvent(ctx context.Context, ev *kv.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := events.EncodeRouterEventJSON(ev)
	if err != nil {
		return err
	}
	if err := p.conn.Publish(p.eventsSubject, data); err != nil {
		return fmt.Errorf("publish kv event of worker %s: %w", ev.Worker, err)
	}
	return nil
}

// PublishHeartbeat implements mockengine.Publisher.
func (p *natsPublisher) PublishHeartbeat(ctx context.Context, hb mockengine.Heartbeat) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := events.EncodeHeartbeat(events.Heartbeat{
		WorkerID: uint64(hb.WorkerID), URL: hb.URL, DataParallelStartRank: hb.DataParallelStartRank,
		DataParallelSize: uint32(hb.DataParallelSize), BlockSize: uint32(hb.BlockSize),
		TotalKVBlocks: uint64(hb.TotalKVBlocks), ModelName: hb.ModelName,
		MaxNumBatchedTokens: uint64(hb.MaxNumBatchedTokens),
	})
	if err != nil {
		return err
	}
	if err := p.conn.Publish(p.workersSubject, data); err != nil {
		return fmt.Errorf("publish heartbeat of worker %d: %w", hb.WorkerID, err)
	}
	return nil
}
