package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WorkerState is one worker rank's view at scrape time.
type WorkerState struct {
	WorkerID            uint64
	DpRank              uint32
	IndexedBlocks       uint64
	ActiveRequests      uint32
	ActivePrefillTokens uint64
	ActiveDecodeBlocks  float64
}

// WorkerGauge is a per-rank figure from outside the actors (what an engine
// reports about itself, a rank's routability), exported as
// kvrouter_<Name>{worker_id, dp_rank}.
type WorkerGauge struct {
	Name     string
	Help     string
	WorkerID uint64
	DpRank   uint32
	Value    float64
}

// State is everything scraped from inside the actors and the I/O parts.
type State struct {
	Workers      []WorkerState
	WorkerGauges []WorkerGauge
	// Counters are monotonically increasing totals (index counters,
	// ingestion counters, gossip counters), exported by name under
	// kvrouter_<name>_total with an optional "source" label.
	Counters []Counter
	// Gauges are point-in-time values: NATS connected (0/1), cluster
	// members, ready (0/1).
	Gauges map[string]float64
}

// Counter is a named total from some source.
type Counter struct {
	Name   string
	Source string
	Value  uint64
}

// StateFunc gathers a State; it is called once per scrape.
type StateFunc func(ctx context.Context) (*State, error)

type stateCollector struct {
	gather StateFunc
	errors prometheus.Counter

	indexed, requests, prefill, decode *prometheus.Desc
}

// RegisterState adds a scrape-time collector over gather.
func (m *Router) RegisterState(gather StateFunc) {
	c := &stateCollector{
		gather: gather,
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_scrape_errors_total", Help: "Scrapes that could not read the actors' state within 2 s: the per-rank and component series are missing from that scrape. A steady rate means the replica is overloaded (or an index digest is running).",
		}),
		indexed:  prometheus.NewDesc("kvrouter_worker_indexed_blocks", "Device-tier blocks the index holds per worker rank (what routing can credit as cached). Compare with the engine's own cache size; 0 on a busy rank means its KV events do not arrive.", []string{"worker_id", "dp_rank"}, nil),
		requests: prometheus.NewDesc("kvrouter_worker_active_requests", "Requests in flight per worker rank, from every replica (gossip shares the load): routed and not yet freed.", []string{"worker_id", "dp_rank"}, nil),
		prefill:  prometheus.NewDesc("kvrouter_worker_active_prefill_tokens", "Prompt tokens still to prefill per worker rank (not cached, prefill not yet done): the prefill queue routing weighs with prefill-load-scale.", []string{"worker_id", "dp_rank"}, nil),
		decode:   prometheus.NewDesc("kvrouter_worker_active_decode_blocks", "KV blocks the rank's in-flight requests occupy (prompt and generated, decayed as they near max_tokens): the decode load routing weighs.", []string{"worker_id", "dp_rank"}, nil),
	}
	m.Registry.MustRegister(c, c.errors)
}

// Describe is unchecked: counter and gauge names come from the state.
func (c *stateCollector) Describe(chan<- *prometheus.Desc) {}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.gather(ctx)
	if err != nil || st == nil {
		c.errors.Inc()
		return
	}
	for _, w := range st.Workers {
		id, rank := strconv.FormatUint(w.WorkerID, 10), strconv.FormatUint(uint64(w.DpRank), 10)
		ch <- prometheus.MustNewConstMetric(c.indexed, prometheus.GaugeValue, float64(w.IndexedBlocks), id, rank)
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.GaugeValue, float64(w.ActiveRequests), id, rank)
		ch <- prometheus.MustNewConstMetric(c.prefill, prometheus.GaugeValue, float64(w.ActivePrefillTokens), id, rank)
		ch <- prometheus.MustNewConstMetric(c.decode, prometheus.GaugeValue, w.ActiveDecodeBlocks, id, rank)
	}
	descs := map[string]*prometheus.Desc{}
	for _, g := range st.WorkerGauges {
		d := descs[g.Name]
		if d == nil {
			d = prometheus.NewDesc("kvrouter_"+g.Name, g.Help, []string{"worker_id", "dp_rank"}, nil)
			descs[g.Name] = d
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, g.Value,
			strconv.FormatUint(g.WorkerID, 10), strconv.FormatUint(uint64(g.DpRank), 10))
	}
	sums := map[string]map[string]uint64{}
	for _, ctr := range st.Counters {
		if sums[ctr.Name] == nil {
			sums[ctr.Name] = map[string]uint64{}
		}
		sums[ctr.Name][ctr.Source] += ctr.Value
	}
	for name, bySource := range sums {
		desc := prometheus.NewDesc("kvrouter_"+name+"_total", stateCounterHelp(name), []string{"source"}, nil)
		for src, v := range bySource {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), src)
		}
	}
	for name, v := range st.Gauges {
		desc := prometheus.NewDesc("kvrouter_"+name, stateGaugeHelp(name), nil, nil)
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
}
