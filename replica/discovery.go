package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/discovery"
	"github.com/kvrouter/kvrouter/enginepoll"
	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/metrics"
)

// discoveryLink runs the --discover sources (discovery.Manager) and the
// engine poller, and feeds both into the registry: discovered engines are
// registered (never expiring, their ZMQ KV events subscribed), drained
// when they leave, unhealthy while their pod is not Ready or their
// health check fails, busy while their own queue or KV usage is over the
// thresholds.
type discoveryLink struct {
	r      *Replica
	mgr    *discovery.Manager
	poller *enginepoll.Poller // nil with --engine-poll=off
	log    *slog.Logger
	// digest is the registry's digest as last listed, for the cluster's
	// comparison with peers (cluster.Config.RegistryDigest).
	digest atomic.Uint64
	stop   chan struct{}
	done   chan struct{}
}

func (r *Replica) startDiscovery() error {
	cfg := r.cfg
	sources, err := cfg.DiscoverySources()
	if err != nil {
		return err
	}
	l := &discoveryLink{r: r, log: r.base.With("component", "discovery"), stop: make(chan struct{}), done: make(chan struct{})}
	l.mgr = discovery.NewManager(fleet{r}, sources, r.base)
	if cfg.EnginePoll != config.EnginePollOff {
		o := cfg.EnginePollOptions()
		o.Logger = r.base
		o.OnChange = func(id kv.WorkerID, c enginepoll.Change) {
			l.mgr.Health(id, discovery.Health{Healthy: c.Healthy, Reason: c.Reason, BusyChanged: c.Busy, BusyRanks: c.BusyRanks})
		}
		if l.poller, err = enginepoll.New(o); err != nil {
			return err
		}
	}
	l.mgr.Start()
	r.discovery = l
	go l.targets()
	return nil
}

// targets keeps the poller's engines in step with the registry — the
// discovered workers (or, with --engine-poll=all, every worker with a
// URL) that are not draining — and the registry digest peers compare.
func (l *discoveryLink) targets() {
	defer close(l.done)
	if l.poller == nil && len(l.r.cfg.Discover) == 0 {
		<-l.stop
		return
	}
	every := time.Second
	if l.poller != nil {
		every = min(l.r.cfg.EnginePollInterval, time.Second)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	all := l.r.cfg.EnginePoll == config.EnginePollAll
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		reg, err := l.r.router.Registry(ctx)
		cancel()
		if err != nil {
			continue
		}
		l.digest.Store(reg.Digest)
		if l.poller == nil {
			continue
		}
		discovered := map[kv.WorkerID]bool{}
		for _, e := range l.mgr.Engines() {
			discovered[e.ID] = true
		}
		var targets []enginepoll.Target
		for _, w := range reg.Workers {
			hb := w.Worker
			id := kv.WorkerID(hb.WorkerId)
			if w.Draining || hb.Url == "" || (!all && !discovered[id]) {
				continue
			}
			targets = append(targets, enginepoll.Target{ID: id, URL: hb.Url, DPStart: hb.DataParallelStartRank, DPSize: hb.DataParallelSize})
		}
		l.poller.Set(targets)
	}
}

// Close stops the poller first (its verdicts go to the manager), then the
// targets loop and the sources.
func (l *discoveryLink) Close() {
	close(l.stop)
	<-l.done
	if l.poller != nil {
		l.poller.Close()
	}
	l.mgr.Close()
}

// addState exports the discovery and polling counters and each engine's
// own load per rank.
func (l *discoveryLink) addState(st *metrics.State) {
	ds := l.mgr.Stats()
	st.Counters = append(st.Counters,
		metrics.Counter{Name: "discovery_updates", Source: "discovery", Value: ds.Updates},
		metrics.Counter{Name: "discovery_registered", Source: "discovery", Value: ds.Registered},
		metrics.Counter{Name: "discovery_drained", Source: "discovery", Value: ds.Drained},
		metrics.Counter{Name: "discovery_not_ready", Source: "discovery", Value: ds.NotReady},
		metrics.Counter{Name: "discovery_rejected", Source: "discovery", Value: ds.Rejected})
	for reason, n := range ds.Errors {
		st.Counters = append(st.Counters, metrics.Counter{Name: "discovery_errors", Source: reason, Value: n})
	}
	st.Gauges["discovered_engines"] = float64(len(l.mgr.Engines()))
	if l.poller == nil {
		return
	}
	ps := l.poller.Stats()
	st.Counters = append(st.Counters,
		metrics.Counter{Name: "engine_polls", Source: "enginepoll", Value: ps.Polls},
		metrics.Counter{Name: "engine_health_failures", Source: "enginepoll", Value: ps.HealthFailures},
		metrics.Counter{Name: "engine_transitions", Source: "unhealthy", Value: ps.Unhealthy},
		metrics.Counter{Name: "engine_transitions", Source: "healthy", Value: ps.Healthy},
		metrics.Counter{Name: "engine_transitions", Source: "busy", Value: ps.Busy},
		metrics.Counter{Name: "engine_transitions", Source: "idle", Value: ps.Idle})
	for reason, n := range ps.MetricsErrors {
		st.Counters = append(st.Counters, metrics.Counter{Name: "engine_metrics_errors", Source: reason, Value: n})
	}
	healthy := 0
	for _, e := range l.poller.States() {
		if e.Healthy {
			healthy++
		}
		for _, rk := range e.Ranks {
			g := func(name, help string, v float64) {
				st.WorkerGauges = append(st.WorkerGauges, metrics.WorkerGauge{Name: name, Help: help, WorkerID: uint64(e.ID), DpRank: rk.DpRank, Value: v})
			}
			g("engine_requests_running", "Requests the engine reports running (all its clients'), from its /metrics.", rk.Running)
			g("engine_requests_waiting", "Requests the engine reports waiting in its own queue (all its clients'), from its /metrics.", rk.Waiting)
			if rk.HasKVUsage {
				g("engine_kv_usage", "Fraction of KV cache the engine reports in use, from its /metrics.", rk.KVUsage)
			}
		}
	}
	st.Gauges["polled_engines_healthy"] = float64(healthy)
}

// fleet is the replica as discovery's Fleet.
type fleet struct{ r *Replica }

// Register registers a discovered engine like a heartbeat would (the same
// block-size and address checks), but never expiring, and subscribes to
// its ZMQ KV events.
func (f fleet) Register(ctx context.Context, rec discovery.Record) error {
	r := f.r
	hb := events.Heartbeat{WorkerID: uint64(rec.ID), URL: rec.URL, DataParallelSize: rec.DPSize, BlockSize: rec.BlockSize,
		KVEventsEndpoint: rec.KVEventsEndpoint, ReplayEndpoint: rec.ReplayEndpoint, Role: rec.Role.String()}
	if len(rec.Models) > 0 {
		hb.ModelName = rec.Models[0]
	}
	if hb.BlockSize != 0 && int(hb.BlockSize) != r.cfg.BlockSize {
		r.metrics.WorkerRejected("block_size_mismatch")
		r.rejects.warn("discovered engine refused: its block size differs from the router's", "engine", rec.Name,
			"worker", rec.ID, "engine_block_size", hb.BlockSize, "router_block_size", r.cfg.BlockSize)
		return fmt.Errorf("engine block size %d, router %d", hb.BlockSize, r.cfg.BlockSize)
	}
	zmq := r.bus != nil && r.bus.zmq != nil
	if !r.admitHeartbeat(hb, zmq) {
		return errors.New("refused by the worker-address policy")
	}
	if err := r.router.RegisterWorker(hb.Proto(), true); err != nil {
		r.rejects.warn("discovered engine not registered", "engine", rec.Name, "worker", rec.ID, "err", err)
		return err
	}
	if zmq && hb.KVEventsEndpoint != "" {
		r.bus.zmq.heartbeat(hb)
	}
	return nil
}

func (f fleet) SetCondition(ctx context.Context, id kv.WorkerID, cond kv.WorkerState, on bool, ranks []uint32, reason string) error {
	_, _, err := f.r.router.SetWorkerCondition(ctx, id, cond, on, ranks, reason)
	return err
}
