package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/internal/redial"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// zmqLink subscribes to engines that publish KV events on ZMQ (plain vLLM
// and SGLang): workers announce kv_events_endpoint in their heartbeats, or
// are listed in --zmq-endpoints.
type zmqLink struct {
	mgr    *zmqevents.Manager
	router *actors.Router
	log    *slog.Logger
	static map[kv.WorkerID]bool
	stop   chan struct{}
	done   chan struct{}
}

func startZMQ(cfg config.Config, router *actors.Router, base *slog.Logger, onDrop func(reason string), links *metrics.Links) (*zmqLink, error) {
	waits := &redial.Waits{}
	mgr, err := zmqevents.NewManager(zmqevents.Options{
		BlockSize: cfg.BlockSize, Handler: router.ApplyEvent, Logger: base, OnDrop: onDrop, Trust: router,
		Redial: cfg.ZMQRedial(), Limiter: cfg.ZMQConnectLimiter(), Waits: waits,
		OnReconnect: func(reason string) { links.Reconnect("zmq", reason) },
	})
	if err != nil {
		return nil, fmt.Errorf("zmq ingestion: %w", err)
	}
	links.RegisterBackoff("zmq", waits.Max)
	z := &zmqLink{mgr: mgr, router: router, log: base.With("component", "replica"), static: map[kv.WorkerID]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	eps, err := config.ParseZMQEndpoints(cfg.ZMQEndpoints)
	if err != nil {
		return nil, errors.Join(err, mgr.Close())
	}
	for _, ep := range eps {
		if _, err := mgr.Ensure(zmqevents.WorkerEndpoint{
			WorkerID: kv.WorkerID(ep.WorkerID), Endpoint: ep.Endpoint, ReplayEndpoint: ep.Replay,
			DPSize: ep.DPSize, DPStartRank: ep.DPStartRank, Bind: ep.Bind,
		}); err != nil {
			return nil, errors.Join(fmt.Errorf("--zmq-endpoints %d: %w", ep.WorkerID, err), mgr.Close())
		}
		z.static[kv.WorkerID(ep.WorkerID)] = true
	}
	go z.prune(cfg.HeartbeatTimeout)
	return z, nil
}

// heartbeat subscribes to a worker that announces a ZMQ endpoint.
func (z *zmqLink) heartbeat(hb events.Heartbeat) {
	if hb.KVEventsEndpoint == "" {
		return
	}
	changed, err := z.mgr.Ensure(zmqevents.WorkerEndpoint{
		WorkerID: kv.WorkerID(hb.WorkerID), Endpoint: hb.KVEventsEndpoint, ReplayEndpoint: hb.ReplayEndpoint,
		DPSize: int(max(hb.DataParallelSize, 1)), DPStartRank: hb.DataParallelStartRank,
	})
	if err != nil {
		z.log.Warn("cannot subscribe to a worker's ZMQ KV events", "worker", hb.WorkerID,
			"endpoint", hb.KVEventsEndpoint, "err", err)
		return
	}
	if changed {
		z.log.Info("subscribed to ZMQ KV events", "worker", hb.WorkerID, "endpoint", hb.KVEventsEndpoint)
	}
}

// subscribe starts the subscription of a worker registered through the
// API with a kv_events_endpoint (already checked against the worker-address
// policy), exactly as for a heartbeat announcing it.
func (z *zmqLink) subscribe(ep zmqevents.WorkerEndpoint) error {
	changed, err := z.mgr.Ensure(ep)
	if err != nil {
		return err
	}
	if changed {
		z.log.Info("subscribed to ZMQ KV events", "worker", uint64(ep.WorkerID), "endpoint", ep.Endpoint,
			"dp_size", ep.DPSize, "dp_start_rank", ep.DPStartRank, "source", "api")
	}
	return nil
}

// prune drops the subscriptions of workers the registry no longer has
// (their heartbeats stopped), so a dead engine is not dialed forever.
func (z *zmqLink) prune(every time.Duration) {
	defer close(z.done)
	if every <= 0 {
		every = 10 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-z.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		reg, err := z.router.Registry(ctx)
		cancel()
		if err != nil {
			continue
		}
		live := map[kv.WorkerID]bool{}
		for _, w := range reg.Workers {
			live[kv.WorkerID(w.Worker.WorkerId)] = true
		}
		for _, id := range z.mgr.Workers() {
			if !live[id] && !z.static[id] {
				z.mgr.Remove(id)
				z.log.Info("unsubscribed from a departed worker's ZMQ KV events", "worker", id)
			}
		}
	}
}

func (z *zmqLink) addState(st *metrics.State) {
	s := z.mgr.Stats()
	for name, v := range map[string]uint64{
		"zmq_messages": s.Messages, "zmq_events": s.Events, "zmq_stored_blocks": s.StoredBlocks,
		"zmq_malformed": s.Malformed, "zmq_duplicates": s.Duplicates, "zmq_replays": s.Replays,
		"zmq_replay_errors": s.ReplayErrors, "zmq_replayed": s.Replayed, "zmq_lost": s.Lost,
		"zmq_restarts": s.Restarts, "zmq_ref_suppressed": s.RefSuppressed, "zmq_connections": s.Connections,
	} {
		st.Counters = append(st.Counters, metrics.Counter{Name: name, Source: "zmq", Value: v})
	}
}

func (z *zmqLink) Close() {
	close(z.stop)
	<-z.done
	if err := z.mgr.Close(); err != nil {
		z.log.Warn("closing the ZMQ subscriptions", "err", err)
	}
}
