package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/parity"
)

// Live cache parity in the proxy (docs/parity.md): every answer's usage
// is read — the end of a unary answer, the usage chunk of a stream — and
// compared with the router's token count and the cache hit
// the route decision predicted. A model whose counts keep differing is
// switched to engine tokenization for itself alone.

// usageTail is how much of a unary answer's end is kept to read its
// usage (the client gets all of it either way): an answer up to twice
// this is parsed whole, a longer one from its last usageTail bytes, where
// OpenAI-compatible servers put "usage" (parity.TailUsage). So a proxied
// request holds at most 2 × usageTail for parity however long its answer.
const usageTail = 64 << 10

// parityState is the proxy's side of the tracker.
type parityState struct {
	tracker *parity.Tracker
	warn    loglimit.Limiter
	// checking holds, per model, whether a background check runs (one at
	// a time per model: the checks sample the traffic).
	checking sync.Map // string → *atomic.Bool
}

type forceRouterKey struct{}

// forceRouterTokenizer makes tokenizeInput use the router's own
// tokenizer whatever the model's mode (the background check).
func forceRouterTokenizer(ctx context.Context) context.Context {
	return context.WithValue(ctx, forceRouterKey{}, true)
}

// engineFor is the engine tokenizer a model's prompts go through, or nil
// to tokenize in process: --tokenizer-mode engine for every model, or a
// model the parity tracker switched.
func (s *Server) engineFor(ctx context.Context, m *servedModel) *EngineTokenizer {
	if eng := s.opts.Models.Engine; eng != nil {
		return eng
	}
	if s.parity == nil || m.tok == nil || ctx.Value(forceRouterKey{}) != nil {
		return nil
	}
	if s.parity.tracker.Mode(m.engineName()) == parity.ModeEngine {
		return s.opts.Models.fallback
	}
	return nil
}

// paritySource says how a text or chat prompt of m was just tokenized.
func (s *Server) paritySource(m *servedModel) parity.Source {
	if s.engineFor(context.Background(), m) != nil {
		return parity.SourceEngine
	}
	return parity.SourceRouter
}

// parityModel is the tracker's and the metrics' name of a request's
// model: the served model whose tokenizer applies (an adapter's base),
// "unknown" without one (token ids to a router serving no model).
func parityModel(m *servedModel) string {
	if m == nil {
		return "unknown"
	}
	return m.engineName()
}

// requestUsage makes a streamed request ask the engine for its usage
// chunk (stream_options.include_usage) when the client did not, and
// remembers to strip that chunk from the client's stream.
func (p *proxied) requestUsage() {
	if p.s.parity == nil {
		return
	}
	var stream bool
	if raw, ok := p.fields["stream"]; !ok || json.Unmarshal(raw, &stream) != nil || !stream {
		return
	}
	if _, ok := p.fields["stream_options"]; !ok {
		// The common case: the client's bytes with one member appended.
		end := bytes.LastIndexByte(p.body, '}')
		if end < 0 {
			return
		}
		body := make([]byte, 0, len(p.body)+40)
		body = append(append(body, p.body[:end]...), `,"stream_options":{"include_usage":true}`...)
		body = append(body, p.body[end:]...)
		fields := maps.Clone(p.fields)
		fields["stream_options"] = json.RawMessage(`{"include_usage":true}`)
		p.fields, p.body, p.stripUsage = fields, body, true
		return
	}
	opts := map[string]json.RawMessage{}
	if raw := p.fields["stream_options"]; present(raw) {
		if json.Unmarshal(raw, &opts) != nil {
			return // not an object: the engine answers the client's error
		}
	}
	var include bool
	if raw, ok := opts["include_usage"]; ok && json.Unmarshal(raw, &include) == nil && include {
		return
	}
	opts["include_usage"] = json.RawMessage("true")
	if _, ok := opts["continuous_usage_stats"]; ok {
		// vLLM adds usage to every chunk when both are true; the client,
		// who did not ask for usage, must not get it in any chunk.
		opts["continuous_usage_stats"] = json.RawMessage("false")
	}
	raw, err := json.Marshal(opts)
	if err != nil {
		return
	}
	// The client's own stream_options: the body is re-encoded.
	fields := maps.Clone(p.fields)
	fields["stream_options"] = raw
	body, err := json.Marshal(fields)
	if err != nil {
		return
	}
	p.fields, p.body, p.stripUsage = fields, body, true
}

// observeParity records the answer's usage (reason "": it had one) and
// runs the switch rule.
func (p *proxied) observeParity(reason string) {
	s := p.s
	if s.parity == nil || p.parityDone {
		return
	}
	p.parityDone = true
	model := parityModel(p.model)
	var pm *metrics.Parity
	if s.opts.Metrics != nil {
		pm = s.opts.Metrics.Parity
	}
	if reason == "" && !p.gotUsage {
		reason = "missing"
	}
	if reason != "" {
		if pm != nil {
			pm.WithoutUsage.WithLabelValues(model, reason).Inc()
		}
		if ok, suppressed := s.parity.warn.Allow(time.Now()); ok {
			s.log.Warn("proxied answer not compared with the router's view", "model", model, "worker", p.worker,
				"dp_rank", p.rank, "reason", reason, "request", p.requestID, "suppressed", suppressed)
		}
		return
	}
	now := time.Now()
	res := s.parity.tracker.Observe(now, parity.Observation{
		Model: model, Worker: p.worker, DpRank: p.rank, Source: p.source, RouterTokens: len(p.tokens),
		PredictedCachedTokens: p.predicted, HasPrediction: p.hasPrediction, Usage: p.usage,
	})
	if pm != nil {
		pm.Compared.WithLabelValues(model).Inc()
		if res.Mismatch {
			pm.TokenMismatch.WithLabelValues(model).Inc()
		}
		w, r := strconv.FormatUint(p.worker, 10), strconv.FormatUint(uint64(p.rank), 10)
		if res.CacheCompared {
			pm.PredictedCached.WithLabelValues(model, w, r).Add(float64(res.Predicted))
			pm.ConfirmedCached.WithLabelValues(model, w, r).Add(float64(res.Confirmed))
			pm.UnconfirmedCached.WithLabelValues(model, w, r).Add(float64(res.Unconfirmed))
		} else if p.hasPrediction {
			pm.WithoutUsage.WithLabelValues(model, "no_cached_tokens").Inc()
		}
	}
	if res.Mismatch {
		s.log.Debug("engine prompt_tokens differ from the router's count", "model", model, "worker", p.worker,
			"dp_rank", p.rank, "router_tokens", len(p.tokens), "engine_tokens", p.usage.PromptTokens)
	}
	switch {
	case res.Switched:
		if pm != nil {
			pm.Switches.WithLabelValues(model, string(parity.ModeEngine)).Inc()
		}
		s.log.Warn("token parity broke: model switched to engine tokenization (POST /parity/{model}/reset switches back)",
			"model", model, "parity_ratio", res.Ratio, "window", s.parity.tracker.Config().Window,
			"threshold", s.parity.tracker.Config().MismatchThreshold, "last_router_tokens", len(p.tokens),
			"last_engine_tokens", p.usage.PromptTokens)
	case res.Breached:
		s.log.Warn("token parity broke; automatic switch to engine tokenization is off (--parity-auto-switch)",
			"model", model, "parity_ratio", res.Ratio)
	}
	if p.source == parity.SourceEngine && p.in != nil && p.model != nil && p.model.tok != nil &&
		s.opts.Models.Engine == nil && s.parity.tracker.Mode(model) == parity.ModeEngine {
		s.backgroundCheck(p.model, p.in, p.usage.PromptTokens)
	}
}

// backgroundCheck tokenizes a served request of a switched model with
// the router's own tokenizer, off the request's path and one at a time
// per model, and feeds the tracker's clean window.
func (s *Server) backgroundCheck(m *servedModel, in *textInput, engineTokens int) {
	model := m.engineName()
	v, _ := s.parity.checking.LoadOrStore(model, new(atomic.Bool))
	busy := v.(*atomic.Bool)
	count := func(result string) {
		if s.opts.Metrics != nil {
			s.opts.Metrics.Parity.Checks.WithLabelValues(model, result).Inc()
		}
	}
	if !busy.CompareAndSwap(false, true) {
		count("skipped")
		return
	}
	go func() {
		defer busy.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ids, _, err := s.tokenizeInput(forceRouterTokenizer(ctx), in)
		if err != nil {
			count("error")
			s.log.Debug("background parity check could not tokenize", "model", model, "err", err)
			return
		}
		if len(ids) == engineTokens {
			count("match")
		} else {
			count("mismatch")
		}
		if s.parity.tracker.Check(time.Now(), model, len(ids), engineTokens) {
			if s.opts.Metrics != nil {
				s.opts.Metrics.Parity.Switches.WithLabelValues(model, string(parity.ModeRouter)).Inc()
			}
			s.log.Warn("token parity clean again: model back to router tokenization", "model", model,
				"clean_window", s.parity.tracker.Config().CleanWindow)
		}
	}()
}

// parityStatus is GET /parity: every model's window and mode, every
// rank's unconfirmed-hit rate.
func (s *Server) parityStatus(w http.ResponseWriter, _ *http.Request) {
	if s.parity == nil {
		writeError(w, http.StatusNotFound, "live cache parity is off (--parity=false)")
		return
	}
	writeJSON(w, http.StatusOK, s.parity.tracker.Status())
}

// parityReset is POST /parity/{model}/reset (admin): the operator's
// switch back to router tokenization.
func (s *Server) parityReset(w http.ResponseWriter, r *http.Request) {
	if s.parity == nil {
		writeError(w, http.StatusNotFound, "live cache parity is off (--parity=false)")
		return
	}
	m, err := s.opts.Models.resolve(r.PathValue("model"))
	if err != nil {
		var unknown *unknownModelError
		if errors.As(err, &unknown) {
			writeJSON(w, http.StatusNotFound, map[string]any{"error": err.Error(), "models": unknown.served})
			return
		}
		writeError(w, http.StatusNotFound, "%v", err)
		return
	}
	model := m.engineName()
	was := s.parity.tracker.Reset(model)
	if was {
		if s.opts.Metrics != nil {
			s.opts.Metrics.Parity.Switches.WithLabelValues(model, string(parity.ModeRouter)).Inc()
		}
		s.log.Warn("operator reset: model back to router tokenization", "model", model)
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": model, "tokenization": parity.ModeRouter, "was_switched": was})
}

// parityGauges is the metrics' scrape-time view of the tracker.
func (s *Server) parityGauges() metrics.ParityState {
	st := s.parity.tracker.Status()
	out := metrics.ParityState{}
	for _, m := range st.Models {
		out.Models = append(out.Models, metrics.ModelParity{Model: m.Model, Ratio: m.ParityRatio, Engine: m.Tokenization == parity.ModeEngine})
	}
	for _, r := range st.Ranks {
		out.Ranks = append(out.Ranks, metrics.RankParity{WorkerID: r.WorkerID, DpRank: r.DpRank, UnconfirmedRate: r.UnconfirmedRate})
	}
	return out
}

// modelTokenization is how a served model's prompts are tokenized now
// (router or engine) and its parity window, for /v1/models.
func (s *Server) modelTokenization(m *servedModel) (string, *parity.ModelStatus) {
	switch {
	case s.opts.Models.Engine != nil:
		return string(parity.ModeEngine), nil
	case s.parity == nil:
		return string(parity.ModeRouter), nil
	}
	st, ok := s.parity.tracker.ModelStatus(m.engineName())
	if !ok {
		return string(parity.ModeRouter), nil
	}
	return string(st.Tokenization), &st
}
