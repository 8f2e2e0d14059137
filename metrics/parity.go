package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Parity holds the live cache-parity metrics: the engine's usage of each
// proxied request against the router's token count and predicted hit.
// Counters are pushed by the proxy; the window gauges are pulled from the
// tracker at scrape time (RegisterParityState).
type Parity struct {
	Compared      *prometheus.CounterVec // {model}
	TokenMismatch *prometheus.CounterVec // {model}
	// Cached tokens by model and rank: predicted (the route decision's
	// overlap, capped at prompt - 1), confirmed (the engine's
	// cached_tokens) and unconfirmed (predicted minus confirmed, when
	// positive).
	PredictedCached   *prometheus.CounterVec
	ConfirmedCached   *prometheus.CounterVec
	UnconfirmedCached *prometheus.CounterVec
	WithoutUsage      *prometheus.CounterVec // {model, reason}
	Switches          *prometheus.CounterVec // {model, to}
	Checks            *prometheus.CounterVec // {model, result}
}

func newParity() *Parity {
	cached := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"model", "worker_id", "dp_rank"})
	}
	return &Parity{
		Compared: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_parity_requests_total", Help: "Proxied requests whose engine usage.prompt_tokens was compared with the router's token count.",
		}, []string{"model"}),
		TokenMismatch: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_parity_token_mismatch_total", Help: "Proxied requests whose engine usage.prompt_tokens differ from the router's token count.",
		}, []string{"model"}),
		PredictedCached: cached("kvrouter_parity_predicted_cached_tokens_total",
			"Cached tokens the route decision predicted on the chosen rank (overlap blocks x block size, at most prompt tokens - 1), for requests whose engine reported cached tokens."),
		ConfirmedCached: cached("kvrouter_parity_confirmed_cached_tokens_total",
			"Cached tokens the engine reported (usage.prompt_tokens_details.cached_tokens) for the same requests."),
		UnconfirmedCached: cached("kvrouter_parity_unconfirmed_cached_tokens_total",
			"Predicted cached tokens the engine did not confirm (predicted - confirmed when positive)."),
		WithoutUsage: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_parity_requests_without_usage_total",
			Help: "Proxied requests not compared (or compared without cached tokens), by reason: missing (no usage in the answer), malformed, stream_cut (the engine's stream or the client went away before data: [DONE]), worker_error, no_cached_tokens (usage without cached_tokens).",
		}, []string{"model", "reason"}),
		Switches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_parity_tokenization_switches_total",
			Help: "Tokenization switches of a model: to=engine (token parity broke), to=router (clean window or operator reset).",
		}, []string{"model", "to"}),
		Checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_parity_background_checks_total",
			Help: "Background checks of a model in engine tokenization (the router's own count against the engine's prompt_tokens), by result: match, mismatch, error, skipped (one already running).",
		}, []string{"model", "result"}),
	}
}

func (p *Parity) collectors() []prometheus.Collector {
	return []prometheus.Collector{p.Compared, p.TokenMismatch, p.PredictedCached, p.ConfirmedCached, p.UnconfirmedCached,
		p.WithoutUsage, p.Switches, p.Checks}
}

// ParityState is the tracker's window state at scrape time.
type ParityState struct {
	Models []ModelParity
	Ranks  []RankParity
}

// ModelParity is one model's window.
type ModelParity struct {
	Model string
	// Ratio is the window's fraction of matching token counts.
	Ratio float64
	// Engine: the model is tokenized by the engine (switched).
	Engine bool
}

// RankParity is one rank's window of predicted hits.
type RankParity struct {
	WorkerID uint64
	DpRank   uint32
	// UnconfirmedRate is unconfirmed / predicted cached tokens.
	UnconfirmedRate float64
}

type parityCollector struct {
	state                      func() ParityState
	ratio, engine, unconfirmed *prometheus.Desc
}

// RegisterParityState exports the tracker's windows as gauges, read at
// scrape time: kvrouter_parity_ratio{model},
// kvrouter_parity_engine_tokenization{model} and
// kvrouter_parity_unconfirmed_hit_ratio{worker_id, dp_rank}.
func (m *Router) RegisterParityState(state func() ParityState) {
	m.Registry.MustRegister(&parityCollector{
		state: state,
		ratio: prometheus.NewDesc("kvrouter_parity_ratio",
			"Fraction of the model's parity window (router-tokenized requests) whose engine prompt_tokens matched the router's count.", []string{"model"}, nil),
		engine: prometheus.NewDesc("kvrouter_parity_engine_tokenization",
			"1 while the model is tokenized by the engine because its token parity broke, else 0.", []string{"model"}, nil),
		unconfirmed: prometheus.NewDesc("kvrouter_parity_unconfirmed_hit_ratio",
			"Predicted cached tokens the engine did not confirm / predicted cached tokens, over the rank's parity window.", []string{"worker_id", "dp_rank"}, nil),
	})
}

func (c *parityCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ratio
	ch <- c.engine
	ch <- c.unconfirmed
}

func (c *parityCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.state()
	for _, m := range st.Models {
		ch <- prometheus.MustNewConstMetric(c.ratio, prometheus.GaugeValue, m.Ratio, m.Model)
		engine := 0.0
		if m.Engine {
			engine = 1
		}
		ch <- prometheus.MustNewConstMetric(c.engine, prometheus.GaugeValue, engine, m.Model)
	}
	for _, r := range st.Ranks {
		ch <- prometheus.MustNewConstMetric(c.unconfirmed, prometheus.GaugeValue, r.UnconfirmedRate,
			strconv.FormatUint(r.WorkerID, 10), strconv.FormatUint(uint64(r.DpRank), 10))
	}
}
