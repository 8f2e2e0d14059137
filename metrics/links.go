package metrics

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Links are the reconnect metrics of the router's outgoing links (ZMQ
// event publishers, NATS): each path redials on an exponential backoff,
// and these say how often and how far back it is.
type Links struct {
	reconnects *prometheus.CounterVec
	backoff    *prometheus.Desc

	mu       sync.Mutex
	backoffs map[string]func() time.Duration
}

func newLinks(reg *prometheus.Registry) *Links {
	l := &Links{
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_reconnects_total",
			Help: "Reconnects of outgoing links by path (zmq: KV event publishers; nats) and reason (dial_failed, handshake_failed, connection_lost); each waited out the endpoint's backoff.",
		}, []string{"path", "reason"}),
		backoff: prometheus.NewDesc("kvrouter_reconnect_backoff_seconds",
			"Longest reconnect backoff an endpoint of the path is waiting out now (0: every endpoint connected or dialling).",
			[]string{"path"}, nil),
		backoffs: map[string]func() time.Duration{},
	}
	reg.MustRegister(l.reconnects, l)
	return l
}

// Reconnect counts one reconnect of path for reason.
func (l *Links) Reconnect(path, reason string) { l.reconnects.WithLabelValues(path, reason).Inc() }

// RegisterBackoff exports path's current backoff, read at scrape time:
// the longest wait an endpoint of path is in, 0 when none is backing off.
// A later call for the same path replaces the reader.
func (l *Links) RegisterBackoff(path string, longest func() time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.backoffs[path] = longest
}

// Describe is unchecked: the paths come at run time.
func (l *Links) Describe(chan<- *prometheus.Desc) {}

func (l *Links) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	paths := make([]string, 0, len(l.backoffs))
	for p := range l.backoffs {
		paths = append(paths, p)
	}
	fns := make([]func() time.Duration, len(paths))
	sort.Strings(paths)
	for i, p := range paths {
		fns[i] = l.backoffs[p]
	}
	l.mu.Unlock()
	for i, p := range paths {
		ch <- prometheus.MustNewConstMetric(l.backoff, prometheus.GaugeValue, fns[i]().Seconds(), p)
	}
}
