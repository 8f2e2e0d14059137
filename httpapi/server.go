// Package httpapi is the router's HTTP surface: the JSON routing API
// (/route, /prefill_done, /free, /overlap_scores, /potential_loads,
// /workers), health and readiness, Prometheus metrics, and the
// OpenAI-compatible proxy (/v1/completions). Every error is a JSON body
// {"error": "..."} with a 4xx/5xx code; no input can make it panic.
package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/metrics"
)

// Options configures the HTTP server.
type Options struct {
	Router       *actors.Router
	Metrics      *metrics.Router
	BlockSize    int
	MaxBodyBytes int64
	// Ready reports why the replica is not ready yet (nil = ready).
	Ready func() error
	// Proxy enables /v1/completions.
	Proxy  bool
	Client *http.Client // for proxying; default has sane timeouts
	// OutputBlockDecayFloor is the smallest weight the proxy gives a
	// generated block once the expected output length is exceeded.
	OutputBlockDecayFloor float64
	TrackOutputBlocks     bool
	// Pprof serves Go profiles under /debug/pprof/.
	Pprof bool
	Log   *slog.Logger
}

// Server serves the API.
type Server struct {
	opts Options
	mux  *http.ServeMux
	log  *slog.Logger

	urlsMu      sync.Mutex
	urls        map[uint64]string // worker id → base URL, for the proxy
	urlsRefresh time.Time
}

// New builds the server and its routes.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 8 << 20
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
			ResponseHeaderTimeout: 10 * time.Minute,
		}}
	}
	s := &Server{opts: opts, mux: http.NewServeMux(), log: opts.Log.With("component", "httpapi")}
	s.handle("POST /route", "route", s.route)
	s.handle("POST /prefill_done", "prefill_done", s.prefillDone)
	s.handle("POST /free", "free", s.free)
	s.handle("POST /overlap_scores", "overlap_scores", s.overlapScores)
	s.handle("POST /potential_loads", "potential_loads", s.potentialLoads)
	s.handle("GET /workers", "workers", s.listWorkers)
	s.handle("POST /workers", "workers", s.addWorker)
	s.handle("DELETE /workers/{id}", "workers", s.deleteWorker)
	s.handle("GET /healthz", "healthz", s.healthz)
	s.handle("GET /readyz", "readyz", s.readyz)
	if opts.Metrics != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Metrics.Registry, promhttp.HandlerOpts{}))
	}
	if opts.Proxy {
		s.handle("POST /v1/completions", "completions", s.completions)
		s.handle("POST /v1/chat/completions", "chat_completions", s.chatCompletions)
	}
	if opts.Pprof {
		s.mux.HandleFunc("/debug/pprof/", pprof.Index)
		s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
	return s
}

// Handler returns the root handler.
func (s *Server) Handler() http.Handler { return s.mux }

// handle wraps a handler with panic containment and status counting.
func (s *Server) handle(pattern, name string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		defer func() {
			if p := recover(); p != nil {
				if errors.Is(asError(p), http.ErrAbortHandler) {
					panic(p)
				}
				s.log.Error("handler panic", "endpoint", name, "panic", p)
				if !sw.wrote {
					writeError(sw, http.StatusInternalServerError, "internal error")
				}
			}
			if s.opts.Metrics != nil {
				s.opts.Metrics.HTTPRequests.WithLabelValues(name, strconv.Itoa(sw.code)).Inc()
			}
		}()
		h(sw, r)
	})
}

func asError(p any) error {
	if err, ok := p.(error); ok {
		return err
	}
	return nil
}

type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush lets the proxy stream through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		w.wrote = true
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (it crashes the program instead)
	return "kvr-" + hex.EncodeToString(b[:])
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
