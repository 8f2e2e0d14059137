package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Tokenize are the metrics of the bound on prompts the router tokenizes at
// once (--tokenize-concurrency).
type Tokenize struct {
	// Busy counts prompts refused with 503 because every slot stayed
	// taken for the whole queue timeout.
	Busy prometheus.Counter

	inFlight *prometheus.Desc
	mu       sync.Mutex
	read     func() int
}

func newTokenize(reg *prometheus.Registry) *Tokenize {
	t := &Tokenize{
		Busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_tokenize_busy_total",
			Help: "Prompts answered 503 because every tokenization slot (--tokenize-concurrency) stayed busy for --tokenize-queue-timeout.",
		}),
		inFlight: prometheus.NewDesc("kvrouter_tokenize_in_flight",
			"Prompts being tokenized by the router now (at most --tokenize-concurrency).", nil, nil),
	}
	reg.MustRegister(t.Busy, t)
	return t
}

// RegisterInFlight sets how the in-flight gauge is read (the HTTP server's
// slots); a later call replaces it.
func (t *Tokenize) RegisterInFlight(read func() int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.read = read
}

// Describe is unchecked: the gauge exists once a reader is registered.
func (t *Tokenize) Describe(chan<- *prometheus.Desc) {}

func (t *Tokenize) Collect(ch chan<- prometheus.Metric) {
	t.mu.Lock()
	read := t.read
	t.mu.Unlock()
	if read != nil {
		ch <- prometheus.MustNewConstMetric(t.inFlight, prometheus.GaugeValue, float64(read()))
	}
}
