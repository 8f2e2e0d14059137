package replica

import (
	"strings"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/trust"
)

// indexTrustGauge is kvrouter_index_trust{worker_id, dp_rank}: the rank's
// index trust as a number (0 exact, 1 degraded, 2 untrusted).
func indexTrustGauge(worker uint64, rk actors.RankStatus) metrics.WorkerGauge {
	v := 0.0
	for _, s := range trust.States {
		if s.String() == rk.IndexTrust.State {
			v = float64(s)
		}
	}
	return metrics.WorkerGauge{Name: "index_trust",
		Help:     "Index trust of a worker rank: 0 exact, 1 degraded (scored from the index, visible), 2 untrusted (scored from predicted blocks); docs/index-trust.md.",
		WorkerID: worker, DpRank: rk.DpRank, Value: v}
}

// indexTrustCounters are kvrouter_index_trust_to_<state>_total{source=
// reason}: how often ranks entered each state, and why.
func indexTrustCounters(transitions map[string]uint64) []metrics.Counter {
	out := make([]metrics.Counter, 0, len(transitions))
	for k, n := range transitions {
		state, reason, _ := strings.Cut(k, "/")
		out = append(out, metrics.Counter{Name: "index_trust_to_" + state, Source: reason, Value: n})
	}
	return out
}
