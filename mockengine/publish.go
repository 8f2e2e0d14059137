package mockengine

import (
	"context"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// Heartbeat is what a worker announces about itself on every heartbeat,
// so routers can register it and reach it.
type Heartbeat struct {
	WorkerID              kv.WorkerID
	URL                   string // http://host:port of the completions API
	DataParallelStartRank uint32
	DataParallelSize      int
	BlockSize             int
	TotalKVBlocks         int
	ModelName             string
	MaxNumBatchedTokens   int
	// KVEventsEndpoint and ReplayEndpoint announce a ZMQ event publisher
	// (rank 0's addresses; rank i adds i to the port). Empty with NATS.
	KVEventsEndpoint string
	ReplayEndpoint   string
	// Role is prefill, decode or both.
	Role kv.Role
}

// Publisher carries a worker's KV events and heartbeats to routers
// (natsbus in the mockworker command). Calls come from one goroutine per
// kind, events in emission order.
type Publisher interface {
	PublishEvent(ctx context.Context, ev *kv.Event) error
	PublishHeartbeat(ctx context.Context, hb Heartbeat) error
}

// publishTimeout bounds one publication, so a stuck transport delays the
// events behind it but never wedges shutdown.
const publishTimeout = 2 * time.Second

// eventQueue decouples the engine (which emits under a rank lock) from
// the publisher (which may block on the network). It is unbounded: the
// engine's event rate is bounded by its step rate, and dropping an event
// would desynchronise every router's index.
type eventQueue struct {
	mu      sync.Mutex
	pending []kv.Event
	notify  chan struct{} // capacity 1
}

func newEventQueue() *eventQueue { return &eventQueue{notify: make(chan struct{}, 1)} }

func (q *eventQueue) push(ev kv.Event) {
	q.mu.Lock()
	q.pending = append(q.pending, ev)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *eventQueue) take() []kv.Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.pending
	q.pending = nil
	return out
}

// publishEvents publishes queued events until stop closes, then publishes
// whatever is left and returns.
func (s *Server) publishEvents(stop <-chan struct{}) {
	for {
		batch := s.events.take()
		for i := range batch {
			s.publishEvent(&batch[i])
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-s.events.notify:
		case <-stop:
			for _, ev := range s.events.take() {
				s.publishEvent(&ev)
			}
			return
		}
	}
}

func (s *Server) publishEvent(ev *kv.Event) {
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	if err := s.pub.PublishEvent(ctx, ev); err != nil {
		s.metrics.publishErrors.WithLabelValues("kv_event").Inc()
		s.log.Warn("publish kv event failed", "event_id", ev.EventID, "dp_rank", ev.Worker.DpRank, "kind", ev.Kind, "err", err)
		return
	}
	s.metrics.eventsPublished.Inc()
}

// heartbeats announces the worker at once and then every interval until
// ctx is done.
func (s *Server) heartbeats(ctx context.Context, url string) {
	cfg := s.cfg.Engine
	hb := Heartbeat{
		WorkerID: cfg.WorkerID, URL: url, DataParallelSize: cfg.DPSize, BlockSize: cfg.BlockSize,
		TotalKVBlocks: cfg.TotalKVBlocks, ModelName: cfg.ModelName, MaxNumBatchedTokens: cfg.MaxNumBatchedTokens,
		Role: s.cfg.Role,
	}
	ticker := time.NewTicker(s.cfg.HeartbeatInterval)
	defer ticker.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, publishTimeout)
		err := s.pub.PublishHeartbeat(pctx, hb)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.metrics.publishErrors.WithLabelValues("heartbeat").Inc()
			s.log.Warn("publish heartbeat failed", "err", err)
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return
		}
	}
}
