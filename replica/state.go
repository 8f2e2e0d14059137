package replica

import (
	"context"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/metrics"
)

// gatherState feeds the scrape-time collector: per-worker state from the
// actors, index counters, ingestion and gossip counters, readiness.
func (r *Replica) gatherState(ctx context.Context) (*metrics.State, error) {
	st, err := r.router.Status(ctx, false)
	if err != nil {
		return nil, err
	}
	out := &metrics.State{Gauges: map[string]float64{}}
	for _, w := range st.Workers {
		for _, rk := range w.Ranks {
			out.Workers = append(out.Workers, metrics.WorkerState{
				WorkerID: w.WorkerID, DpRank: rk.DpRank, IndexedBlocks: rk.IndexedBlocks,
				ActiveRequests: rk.ActiveRequests, ActivePrefillTokens: rk.ActivePrefillTokens,
				ActiveDecodeBlocks: rk.ActiveDecodeBlocks,
			})
			routable := 0.0
			if rk.State == kv.WorkerActive.String() {
				routable = 1
			}
			out.WorkerGauges = append(out.WorkerGauges, metrics.WorkerGauge{Name: "worker_routable",
				Help:     "1 while a worker rank takes new requests; 0 while it is busy, unhealthy or draining (see /workers).",
				WorkerID: w.WorkerID, DpRank: rk.DpRank, Value: routable})
			out.WorkerGauges = append(out.WorkerGauges, indexTrustGauge(w.WorkerID, rk))
		}
	}
	out.Counters = append(out.Counters, indexTrustCounters(st.IndexTrustTransitions)...)
	for name, v := range st.IndexCounters {
		if name == actors.HeldBlocksStat {
			out.Gauges["index_held_blocks"] = float64(v)
			continue
		}
		out.Counters = append(out.Counters, metrics.Counter{Name: "index_" + name, Source: "index", Value: v})
	}
	out.Gauges["registered_workers"] = float64(len(st.Workers))
	out.Gauges["tracked_requests"] = float64(st.TrackedRequests)
	ready := 1.0
	if r.Ready() != nil {
		ready = 0
	}
	out.Gauges["ready"] = ready
	r.addClientState(ctx, out)
	out.Counters = append(out.Counters, metrics.Counter{Name: "index_snapshots", Source: "jetstream", Value: r.snapshots.Load()})
	if r.bus != nil {
		r.bus.addState(out)
	}
	if r.cluster != nil {
		r.cluster.addState(out)
	}
	if r.discovery != nil {
		r.discovery.addState(out)
	}
	return out, nil
}
