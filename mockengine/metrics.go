package mockengine

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric flavours: whose names the mock worker's /metrics uses.
const (
	MetricsVLLM   = "vllm"
	MetricsSGLang = "sglang"
)

// engineCollector exports the ranks' stats under vLLM's metric names on
// every scrape, labelled like vLLM's data-parallel engines (or, with the
// SGLang flavour, SGLang's load metrics labelled by dp_rank).
type engineCollector struct {
	engine *Engine
	model  string
	sglang bool
	faults *faults

	running, waiting, usage, cached     *prometheus.Desc
	hits, queries, preemptions          *prometheus.Desc
	promptTokens, genTokens, successful *prometheus.Desc
}

func newEngineCollector(e *Engine, model, flavor string, f *faults) *engineCollector {
	labels := []string{"model_name", "engine"}
	if flavor == MetricsSGLang {
		labels = []string{"model_name", "dp_rank"}
		d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, labels, nil) }
		return &engineCollector{
			engine: e, model: model, sglang: true, faults: f,
			running: d("sglang:num_running_reqs", "The number of running requests."),
			waiting: d("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
			usage:   d("sglang:token_usage", "The token usage (fraction of KV tokens in use)."),
			cached:  d("mockworker_cached_blocks", "KV blocks registered in the prefix cache, referenced or evictable."),
		}
	}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, labels, nil) }
	return &engineCollector{
		engine: e, model: model, faults: f,
		running:      d("vllm:num_requests_running", "Requests in the running batch."),
		waiting:      d("vllm:num_requests_waiting", "Requests waiting to be scheduled."),
		usage:        d("vllm:kv_cache_usage_perc", "Fraction of KV blocks referenced by running requests (1 = full)."),
		cached:       d("mockworker_cached_blocks", "KV blocks registered in the prefix cache, referenced or evictable."),
		hits:         d("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache."),
		queries:      d("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache."),
		preemptions:  d("vllm:num_preemptions_total", "Requests preempted for lack of KV blocks."),
		promptTokens: d("vllm:prompt_tokens_total", "Prompt tokens of scheduled requests."),
		genTokens:    d("vllm:generation_tokens_total", "Generated tokens."),
		successful:   d("vllm:request_success_total", "Requests that generated all their tokens."),
	}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.usage, c.cached, c.hits, c.queries, c.preemptions, c.promptTokens, c.genTokens, c.successful} {
		if d != nil {
			ch <- d
		}
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.engine.Stats() {
		rank := strconv.FormatUint(uint64(st.DpRank), 10)
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, c.model, rank)
		}
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), c.model, rank)
		}
		gauge(c.running, float64(st.Running))
		gauge(c.waiting, float64(st.Waiting+int(c.faults.extraWaiting.Load())))
		gauge(c.usage, st.KVUsage)
		gauge(c.cached, float64(st.CachedBlocks))
		if c.sglang {
			continue
		}
		counter(c.hits, st.PrefixHits)
		counter(c.queries, st.PrefixQueries)
		counter(c.preemptions, st.Preemptions)
		counter(c.promptTokens, st.PromptTokens)
		counter(c.genTokens, st.GenerationTokens)
		counter(c.successful, st.FinishedRequests)
	}
}

// serverMetrics are the front end's own metrics.
type serverMetrics struct {
	registry        *prometheus.Registry
	ttft            prometheus.Histogram
	eventsPublished prometheus.Counter
	publishErrors   *prometheus.CounterVec
}

func newServerMetrics(e *Engine, model, flavor string, f *faults) *serverMetrics {
	m := &serverMetrics{
		registry: prometheus.NewRegistry(),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "vllm:time_to_first_token_seconds",
			Help:        "Wall-clock time from request arrival to the first token.",
			ConstLabels: prometheus.Labels{"model_name": model},
			Buckets:     []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80},
		}),
		eventsPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mockworker_kv_events_published_total", Help: "KV events handed to the publisher successfully.",
		}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mockworker_publish_errors_total", Help: "Failed publications, by kind (kv_event, heartbeat).",
		}, []string{"kind"}),
	}
	m.registry.MustRegister(newEngineCollector(e, model, flavor, f), m.ttft, m.eventsPublished, m.publishErrors)
	return m
}

// faults are what a test (or POST /fault) makes the worker report: a
// failing /health, and requests waiting beyond its own (as if other
// clients queued there).
type faults struct {
	unhealthy    atomic.Bool
	extraWaiting atomic.Int64
	eventsMuted  atomic.Bool
	drop         dropFaults // cut.go
}
