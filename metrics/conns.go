package metrics

import "github.com/prometheus/client_golang/prometheus"

func newConnsRefused() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvrouter_conns_refused_total",
		Help: "Client connections refused or closed by the fair-slot guards, by listener (http, grpc) and reason " +
			"(per_client_cap: the address already held its share, http-max-conns-per-client or grpc-max-conns-per-client; " +
			"unauthenticated_idle: idle past unauthenticated-idle-timeout before passing the token check; " +
			"auth_failed: a request or call failed the token check; its connection is closed unless it is a gRPC connection that already carried authenticated calls).",
	}, []string{"listener", "reason"})
}

// ConnRefused counts one refused or closed connection; its callers pass
// listener and reason from fixed sets (connguard's reasons).
func (m *Router) ConnRefused(listener, reason string) {
	m.connsRefused.WithLabelValues(listener, reason).Inc()
}

// ConnRefusedCounter is the counter ConnRefused adds to (tests read it).
func (m *Router) ConnRefusedCounter(listener, reason string) prometheus.Counter {
	return m.connsRefused.WithLabelValues(listener, reason)
}
