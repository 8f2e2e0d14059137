package metrics

import "github.com/prometheus/client_golang/prometheus"

// SetReplica exports kvrouter_replica_info{replica="<id>"} 1: the name
// this replica gossips under, on the replica's own /metrics. It is an info
// series rather than a constant label on every metric so the other
// series keep their label sets; a dashboard joins it on the scrape's
// instance label (`* on (instance) group_left (replica)
// kvrouter_replica_info`), which works the same for a local cluster and
// in Kubernetes. Call it once, before the first scrape.
func (m *Router) SetReplica(id string) error {
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "kvrouter_replica_info",
		Help:        "Always 1; its replica label is this replica's cluster name (join on instance to name a replica's series).",
		ConstLabels: prometheus.Labels{"replica": id},
	})
	info.Set(1)
	return m.Registry.Register(info)
}
