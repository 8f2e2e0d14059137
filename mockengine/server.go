package mockengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// ServerConfig configures a mock worker: its engine and its front end.
type ServerConfig struct {
	Engine Config
	// HeartbeatInterval is the period of heartbeats (sent only with a
	// publisher).
	HeartbeatInterval time.Duration
	// PublicURL is the URL announced in heartbeats; empty means
	// http://<listener address> (the host name for a wildcard address).
	PublicURL string
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64
	// ShutdownGrace is how long in-flight requests may run on after the
	// serve context ends before they are cut off.
	ShutdownGrace time.Duration
	// MetricsFlavor names the load metrics on /metrics: MetricsVLLM
	// (vllm:num_requests_waiting, …; the default) or MetricsSGLang
	// (sglang:num_queue_reqs, …).
	MetricsFlavor string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Tokenizer, when set, lets the worker take text prompts and chat
	// messages (rendered with its chat template), as vLLM does.
	Tokenizer *tokenizer.Tokenizer
	// ChatDialect is the engine whose chat preprocessing the worker
	// applies before its template (vLLM by default).
	ChatDialect tokenizer.Dialect
	// ChatMismatch, when set, makes the worker render chats differently
	// from that engine on purpose (see ChatMismatch); MismatchTemplate is
	// the template of ChatMismatchTemplate (empty: the model's own with
	// MismatchTemplatePrefix).
	ChatMismatch     ChatMismatch
	MismatchTemplate string
	// Role is the worker's part in disaggregated serving (announced in
	// heartbeats): a prefill worker answers do_remote_decode requests
	// with kv_transfer_params and holds their blocks; a decode worker
	// pulls blocks for do_remote_prefill requests; both does both.
	Role kv.Role
	// KVHoldTimeout is how long a prefill worker holds blocks nobody
	// pulls (vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 480 s); MaxKVHolds
	// bounds the holds (the oldest is released first).
	KVHoldTimeout time.Duration
	MaxKVHolds    int
}

// DefaultServerConfig returns the mock worker's defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		Engine:            DefaultConfig(),
		HeartbeatInterval: time.Second,
		MaxBodyBytes:      16 << 20,
		ShutdownGrace:     5 * time.Second,
		KVHoldTimeout:     480 * time.Second,
		MaxKVHolds:        4096,
	}
}

// Validate checks the front end's fields and the engine's.
func (c ServerConfig) Validate() error {
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	switch {
	case c.HeartbeatInterval <= 0:
		return fmt.Errorf("%w: heartbeat interval %v must be positive", ErrInvalidConfig, c.HeartbeatInterval)
	case c.MaxBodyBytes <= 0:
		return fmt.Errorf("%w: max body bytes %d must be positive", ErrInvalidConfig, c.MaxBodyBytes)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("%w: shutdown grace %v must not be negative", ErrInvalidConfig, c.ShutdownGrace)
	case c.Role >= kv.NumRoles:
		return fmt.Errorf("%w: role %v", ErrInvalidConfig, c.Role)
	case c.KVHoldTimeout <= 0 || c.MaxKVHolds <= 0:
		return fmt.Errorf("%w: KV hold timeout %v and max holds %d must be positive", ErrInvalidConfig, c.KVHoldTimeout, c.MaxKVHolds)
	case c.MetricsFlavor != "" && c.MetricsFlavor != MetricsVLLM && c.MetricsFlavor != MetricsSGLang:
		return fmt.Errorf("%w: metrics flavor %q: want %s or %s", ErrInvalidConfig, c.MetricsFlavor, MetricsVLLM, MetricsSGLang)
	}
	return nil
}

// Server is a mock worker: an Engine behind an OpenAI-style HTTP API,
// publishing its KV events and heartbeats.
type Server struct {
	cfg     ServerConfig
	engine  *Engine
	pub     Publisher
	events  *eventQueue
	metrics *serverMetrics
	faults  faults
	log     *slog.Logger
	handler http.Handler
	// KV transfers (disaggregated serving).
	holds             *kvHolds
	client            *http.Client
	transferredBlocks atomic.Uint64
	transferFailures  atomic.Uint64

	mu      sync.Mutex
	url     string
	serving bool
}

// ErrAlreadyServing is returned by a second Serve.
var ErrAlreadyServing = errors.New("mock worker is already serving")

// NewServer builds a mock worker. pub may be nil: then no events or
// heartbeats are sent (the engine still caches).
func NewServer(cfg ServerConfig, pub Publisher) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, pub: pub, events: newEventQueue(), log: log.With("component", "mockengine"),
		holds: newKVHolds(cfg.MaxKVHolds, cfg.KVHoldTimeout), client: &http.Client{Timeout: 10 * time.Second}}
	engine, err := NewEngine(cfg.Engine, s.enqueueEvent)
	if err != nil {
		return nil, err
	}
	s.engine = engine
	s.metrics = newServerMetrics(engine, cfg.Engine.ModelName, cfg.MetricsFlavor, &s.faults)
	s.handler = s.routes()
	return s, nil
}

// Engine returns the simulated engine, for stats and tests.
func (s *Server) Engine() *Engine { return s.engine }

// Handler returns the HTTP API, for serving it elsewhere (httptest). The
// engine only makes progress while Serve or Engine().Run runs.
func (s *Server) Handler() http.Handler { return s.handler }

// URL is the advertised base URL once Serve has started, else "".
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("POST /tokenize", s.tokenize)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if s.faults.unhealthy.Load() {
			writeError(w, http.StatusServiceUnavailable, "engine unhealthy (injected fault)")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /fault", s.fault)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.engine.Stats())
	})
	mux.HandleFunc("POST /reset_prefix_cache", s.resetPrefixCache)
	mux.HandleFunc("POST /kv_transfer/pulled", s.kvPulled)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	return mux
}

// SetHealthy makes /health answer 200 (true) or 503 (false), as an engine
// whose core died answers.
func (s *Server) SetHealthy(ok bool) { s.faults.unhealthy.Store(!ok) }

// SetExtraWaiting adds n requests to the waiting queue /metrics reports on
// every rank, as if other clients had queued them on the engine.
func (s *Server) SetExtraWaiting(n int) { s.faults.extraWaiting.Store(int64(n)) }

// SetEventsMuted stops (true) or resumes (false) publishing KV events
// while the engine keeps serving and caching: a dead event stream. Muted
// events are lost, not queued (their event ids are spent, so a router
// sees a gap when publishing resumes); each is counted as
// publish_errors_total{kind="kv_event_muted"}.
func (s *Server) SetEventsMuted(muted bool) { s.faults.eventsMuted.Store(muted) }

// fault is POST /fault {"healthy": bool, "extra_waiting": n,
// "restart_rank": r, "reset_rank": r, "events_muted": bool, "dead": bool,
// "drop_after_tokens": n}: the same fault
// injection for workers in other processes (every field may be left out).
// restart_rank restarts one dp rank's engine core (Engine.RestartRank),
// reset_rank clears one rank's prefix cache (Engine.ResetRankPrefixCache);
// the other ranks are untouched. events_muted is SetEventsMuted, dead
// SetDead and drop_after_tokens SetDropAfterTokens (cut.go). Unknown
// fields are refused.
func (s *Server) fault(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Healthy      *bool `json:"healthy"`
		ExtraWaiting *int  `json:"extra_waiting"`
		RestartRank  *int  `json:"restart_rank"`
		ResetRank    *int  `json:"reset_rank"`
		EventsMuted  *bool `json:"events_muted"`
		Dead         *bool `json:"dead"`
		DropAfter    *int  `json:"drop_after_tokens"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "fault: %v", err)
		return
	}
	if body.RestartRank != nil {
		if err := s.engine.RestartRank(*body.RestartRank); err != nil {
			writeError(w, http.StatusBadRequest, "fault: %v", err)
			return
		}
	}
	if body.ResetRank != nil {
		if err := s.engine.ResetRankPrefixCache(*body.ResetRank); err != nil {
			writeError(w, http.StatusConflict, "fault: %v", err)
			return
		}
	}
	if body.Healthy != nil {
		s.SetHealthy(*body.Healthy)
	}
	if body.ExtraWaiting != nil {
		s.SetExtraWaiting(*body.ExtraWaiting)
	}
	if body.EventsMuted != nil {
		s.SetEventsMuted(*body.EventsMuted)
	}
	if body.Dead != nil {
		s.SetDead(*body.Dead)
	}
	if body.DropAfter != nil {
		s.SetDropAfterTokens(*body.DropAfter)
	}
	writeJSON(w, http.StatusOK, map[string]any{"healthy": !s.faults.unhealthy.Load(), "extra_waiting": s.faults.extraWaiting.Load(),
		"events_muted": s.faults.eventsMuted.Load()})
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
		"id": s.cfg.Engine.ModelName, "object": "model", "owned_by": "kvrouter-mockworker",
		"max_model_len": s.cfg.Engine.TotalKVBlocks * s.cfg.Engine.BlockSize,
	}}})
}

func (s *Server) resetPrefixCache(w http.ResponseWriter, _ *http.Request) {
	if err := s.engine.ResetPrefixCache(); err != nil {
		writeError(w, http.StatusConflict, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Serve runs the worker on ln until ctx ends: the engine, the API, event
// publishing and heartbeats. On shutdown it stops accepting, lets requests
// in flight finish for ShutdownGrace, stops the engine, announces Cleared
// for every rank (the cache dies with the process) and publishes every
// remaining event. It returns nil after a shutdown requested by ctx.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.serving {
		s.mu.Unlock()
		return ErrAlreadyServing
	}
	s.serving = true
	s.url = s.cfg.PublicURL
	if s.url == "" {
		s.url = advertisedURL(ln.Addr())
	}
	url := s.url
	s.mu.Unlock()

	engineCtx, stopEngine := context.WithCancel(context.Background())
	defer stopEngine()
	var engineDone sync.WaitGroup
	engineDone.Go(func() {
		if err := s.engine.Run(engineCtx); err != nil {
			s.log.Error("engine did not run", "err", err)
		}
	})

	stopPublishing := make(chan struct{})
	var publishers sync.WaitGroup
	hbCtx, stopHeartbeats := context.WithCancel(ctx)
	defer stopHeartbeats()
	if s.pub != nil {
		publishers.Go(func() { s.publishEvents(stopPublishing) })
		publishers.Go(func() { s.heartbeats(hbCtx, url) })
	}

	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s.log.Info("mock worker serving", "url", url, "worker_id", uint64(s.cfg.Engine.WorkerID),
		"dp_size", s.cfg.Engine.DPSize, "block_size", s.cfg.Engine.BlockSize, "total_kv_blocks", s.cfg.Engine.TotalKVBlocks)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
		serveErr = fmt.Errorf("serve http on %s: %w", ln.Addr(), serveErr)
	}

	grace, cancelGrace := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	shutdownErr := srv.Shutdown(grace)
	cancelGrace()
	stopEngine() // ends every stream still open with ErrStopped
	if shutdownErr != nil {
		if err := srv.Close(); err != nil {
			s.log.Debug("closing the HTTP server after the grace period", "err", err)
		}
	}
	engineDone.Wait()
	s.holds.releaseAll()
	if err := s.engine.ResetPrefixCache(); err != nil {
		s.log.Warn("could not announce the cache as cleared", "err", err)
	}
	stopHeartbeats()
	close(stopPublishing)
	publishers.Wait()
	s.log.Info("mock worker stopped", "url", url)
	return serveErr
}

// advertisedURL turns a listener address into a base URL others can use.
func advertisedURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil && name != "" {
			host = name
		} else {
			host = "127.0.0.1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// enqueueEvent is the engine's event callback: it must not block.
func (s *Server) enqueueEvent(ev kv.Event) {
	if s.faults.eventsMuted.Load() {
		s.metrics.publishErrors.WithLabelValues("kv_event_muted").Inc()
		return
	}
	if s.pub != nil {
		s.events.push(ev)
	}
}
