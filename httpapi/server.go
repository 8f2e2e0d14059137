// Package httpapi is the router's HTTP surface: the JSON routing API
// (/route, /prefill_done, /free, /overlap_scores, /potential_loads,
// /workers), health and readiness, Prometheus metrics, and the
// OpenAI-compatible proxy (/v1/completions). Every error is a JSON body
// {"error": "..."} with a 4xx/5xx code; no input can make it panic.
//
// Routes are data plane (optionally behind a client bearer token), admin
// (worker registration and removal, pprof: behind an admin bearer token,
// on a separate listener, or loopback-only) or open (probes, metrics).
// Worker URLs must satisfy a netpolicy.Policy, checked at registration
// and again at every dial.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/netpolicy"
	"github.com/kvrouter/kvrouter/parity"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// Options configures the HTTP server.
type Options struct {
	Router       *actors.Router
	Metrics      *metrics.Router
	BlockSize    int
	MaxBodyBytes int64
	// Ready reports why the replica is not ready yet (nil = ready).
	Ready func() error
	// Conditions lists what /readyz reports beside the verdict (nil:
	// nothing).
	Conditions func(context.Context) []ReadyCondition
	// Proxy enables /v1/completions and /v1/chat/completions.
	Proxy bool
	// Models are the served models and their tokenizers (text prompts
	// and chat; nil: token ids only).
	Models *Models
	// TrustRequestChatTemplate accepts a chat_template in a request (as
	// vLLM's --trust-request-chat-template); without it such a request
	// is refused: a template is code the router would run.
	TrustRequestChatTemplate bool
	// TokenizeConcurrency bounds the prompts tokenized at once with the
	// router's tokenizers (0: DefaultTokenizeConcurrency);
	// TokenizeQueueTimeout is how long one waits for a slot before 503
	// (0: DefaultTokenizeQueueTimeout).
	TokenizeConcurrency  int
	TokenizeQueueTimeout time.Duration
	// Client is the proxy's HTTP client. The default has sane timeouts,
	// follows no redirects and checks every address it dials against
	// WorkerPolicy; a client given here is used as is.
	Client *http.Client
	// OutputBlockDecayFloor is the smallest weight the proxy gives a
	// generated block once the expected output length is exceeded.
	OutputBlockDecayFloor float64
	TrackOutputBlocks     bool
	// MigrationLimit is how many times one proxied request may move to
	// another worker after its engine failed (migrate.go); 0:
	// DefaultMigrationLimit, negative: never (--migration-limit 0).
	MigrationLimit int
	// Pprof serves Go profiles under /debug/pprof/ (an admin route).
	Pprof bool
	Log   *slog.Logger

	// ReplicaID marks the requests the proxy forwards (HopHeader).
	ReplicaID string
	// AdminTokens, when set, is required (bearer) on the admin routes:
	// POST /workers, DELETE /workers/{id}, /debug/pprof/. Without it
	// the admin routes answer loopback clients only on the main
	// listener, and anyone who reaches the admin listener.
	AdminTokens *Tokens
	// APITokens, when set, is required (bearer) on the data-plane
	// routes; an admin token is accepted too. /healthz, /readyz and
	// /metrics stay open (probes and scrapes).
	APITokens *Tokens
	// AdminSeparate serves the admin routes only on AdminHandler (the
	// --admin-addr listener).
	AdminSeparate bool
	// WorkerPolicy is what a worker URL must satisfy (nil: the private
	// ranges, netpolicy.DefaultAllow, without self addresses).
	WorkerPolicy *netpolicy.Policy
	// Resolve resolves worker host names for WorkerPolicy (nil: the
	// system resolver, 2 s per lookup).
	Resolve netpolicy.Resolver
	// SessionHeader and SessionBodyField name where a request's sticky
	// session id is read (config's session-header, session-body-field;
	// "" = not read).
	SessionHeader    string
	SessionBodyField string
	// WriteTimeout bounds each write to a client (0: none); the deadline
	// moves as a response makes progress, so long streams are fine.
	WriteTimeout time.Duration
	// SubscribeKVEvents starts (or replaces) the ZMQ KV-event
	// subscription of a worker registered by POST /workers with a
	// kv_events_endpoint (nil: no ZMQ ingestion; such a registration is
	// refused).
	SubscribeKVEvents func(zmqevents.WorkerEndpoint) error
	// Parity compares each proxied answer's usage with the router's view
	// and switches models whose tokenization breaks (nil: off).
	Parity *parity.Tracker
}

// HopHeader marks a request the proxy forwarded. A router refuses (508) a
// completion that carries it: a worker URL that leads back to a router
// would otherwise forward each request in a loop.
const HopHeader = "X-Kvrouter-Hop"

// Server serves the API.
type Server struct {
	opts  Options
	mux   *http.ServeMux // the main listener
	admin *http.ServeMux // the --admin-addr listener
	log   *slog.Logger

	promptLog loglimit.Limiter // prompts refused over max-prompt-tokens
	inputLog  loglimit.Limiter // prompts refused for their input (writeInputError)
	busyLog   loglimit.Limiter // prompts refused with every tokenization slot busy

	tokens *tokenSlots // bounds concurrent local tokenization

	urlsMu      sync.Mutex
	urls        map[uint64]string // worker id → base URL, for the proxy
	addrs       map[uint64]string // worker id → its URL's host:port, for the endpoint picker
	urlsRefresh time.Time

	parity *parityState // nil: parity off

	// routes is the route table New registered (docs/openapi.yaml must
	// list exactly these).
	routes []route
}

// access is who may call a route.
type access int

const (
	open      access = iota // probes, metrics
	dataPlane               // APITokens when set
	adminOnly               // the admin gate
)

type route struct {
	pattern, name string
	access        access
	h             http.HandlerFunc
}

// New builds the server and its routes.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 8 << 20
	}
	if opts.WorkerPolicy == nil {
		opts.WorkerPolicy = netpolicy.MustParse(netpolicy.DefaultAllow...)
	}
	if opts.Resolve == nil {
		opts.Resolve = netpolicy.LookupWith(nil, 2*time.Second)
	}
	if opts.Client == nil {
		opts.Client = proxyClient(opts.WorkerPolicy)
	}
	opts.MigrationLimit = migrationLimit(opts.MigrationLimit)
	s := &Server{opts: opts, mux: http.NewServeMux(), admin: http.NewServeMux(), log: opts.Log.With("component", "httpapi"),
		promptLog: loglimit.Limiter{Every: 10 * time.Second},
		inputLog:  loglimit.Limiter{Every: 10 * time.Second},
		busyLog:   loglimit.Limiter{Every: 10 * time.Second},
		tokens:    newTokenSlots(opts.TokenizeConcurrency, opts.TokenizeQueueTimeout)}
	if opts.Metrics != nil {
		opts.Metrics.Tokenize.RegisterInFlight(s.tokens.inFlight)
	}
	routes := []route{
		{"POST /route", "route", dataPlane, s.guardPrompt("route", s.route)},
		{"POST /prefill_done", "prefill_done", dataPlane, s.prefillDone},
		{"POST /free", "free", dataPlane, s.free},
		{"POST /overlap_scores", "overlap_scores", dataPlane, s.guardPrompt("overlap_scores", s.overlapScores)},
		{"POST /potential_loads", "potential_loads", dataPlane, s.guardPrompt("potential_loads", s.potentialLoads)},
		{"GET /workers", "workers", dataPlane, s.listWorkers},
		{"GET /sessions/{id}", "sessions", dataPlane, s.getSession},
		{"DELETE /sessions/{id}", "sessions", dataPlane, s.endSession},
		{"POST /workers", "workers", adminOnly, s.addWorker},
		{"DELETE /workers/{id}", "workers", adminOnly, s.deleteWorker},
		{"GET /decisions/{request_id}", "decisions", adminOnly, s.decision},
		{"GET /healthz", "healthz", open, s.healthz},
		{"GET /readyz", "readyz", open, s.readyz},
	}
	if opts.Metrics != nil {
		h := promhttp.HandlerFor(opts.Metrics.Registry, promhttp.HandlerOpts{})
		routes = append(routes, route{"GET /metrics", "", open, h.ServeHTTP})
	}
	routes = append(routes, route{"GET /v1/models", "models", dataPlane, s.listModels})
	if opts.Models != nil {
		for _, e := range []*EngineTokenizer{opts.Models.Engine, opts.Models.fallback} {
			if e != nil {
				e.client, e.workers = opts.Client, s.allWorkerURLs
			}
		}
	}
	if opts.Parity != nil {
		s.parity = &parityState{tracker: opts.Parity, warn: loglimit.Limiter{Every: 10 * time.Second}}
		routes = append(routes,
			route{"GET /parity", "parity", dataPlane, s.parityStatus},
			route{"POST /parity/{model}/reset", "parity", adminOnly, s.parityReset})
		if opts.Metrics != nil {
			opts.Metrics.RegisterParityState(s.parityGauges)
		}
	}
	if opts.Proxy {
		routes = append(routes,
			route{"POST /v1/completions", "completions", dataPlane, s.guardPrompt("completions", s.completions)},
			route{"POST /v1/chat/completions", "chat_completions", dataPlane, s.chatCompletions})
	}
	if opts.Pprof {
		routes = append(routes,
			route{"/debug/pprof/", "", adminOnly, pprof.Index},
			route{"/debug/pprof/profile", "", adminOnly, pprof.Profile},
			route{"/debug/pprof/symbol", "", adminOnly, pprof.Symbol},
			route{"/debug/pprof/trace", "", adminOnly, pprof.Trace})
	}
	s.routes = routes
	for _, rt := range routes {
		switch {
		case rt.access != adminOnly:
			s.handle(s.mux, rt, nil)
		case opts.AdminSeparate:
			s.handle(s.mux, route{rt.pattern, "", open, func(w http.ResponseWriter, r *http.Request) {
				writeError(w, http.StatusNotFound, "%s %s is served on the admin listener (--admin-addr) only", r.Method, r.URL.Path)
			}}, nil)
		default:
			s.handle(s.mux, rt, func(w http.ResponseWriter, r *http.Request) bool { return s.adminGate(w, r, false) })
		}
		// The admin listener: admin routes, the registry listing, probes
		// and metrics.
		switch {
		case rt.access == open:
			s.handle(s.admin, rt, nil)
		case rt.access == adminOnly || rt.pattern == "GET /workers":
			s.handle(s.admin, rt, func(w http.ResponseWriter, r *http.Request) bool { return s.adminGate(w, r, true) })
		}
	}
	notFound := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	}
	s.handle(s.mux, route{"/", "", open, notFound}, nil)
	s.handle(s.admin, route{"/", "", open, notFound}, nil)
	return s
}

// proxyClient is the proxy's default client: no redirects (a worker's
// 307 must not send the client's body elsewhere), and every dial checked
// against the worker policy at the address actually dialed, so a name
// that resolves differently since registration is caught too.
func proxyClient(policy *netpolicy.Policy) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:         guardedDial(dialer, policy),
			MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
			ResponseHeaderTimeout: 10 * time.Minute,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func guardedDial(d *net.Dialer, policy *netpolicy.Policy) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		dd := *d
		dd.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("dial %s: %w", address, err)
			}
			return policy.CheckDial(host, ap)
		}
		return dd.DialContext(ctx, network, addr)
	}
}

// Handler returns the main listener's handler.
func (s *Server) Handler() http.Handler { return s.mux }

// AdminHandler returns the --admin-addr listener's handler: the admin
// routes, GET /workers, probes and metrics.
func (s *Server) AdminHandler() http.Handler { return s.admin }

// handle registers a route with its gate (nil = none), write deadlines,
// panic containment and status counting (routes with a name).
func (s *Server) handle(mux *http.ServeMux, rt route, gate func(http.ResponseWriter, *http.Request) bool) {
	if gate == nil && rt.access == dataPlane {
		gate = s.dataGate
	}
	h, name := rt.h, rt.name
	mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK, timeout: s.opts.WriteTimeout}
		sw.dl, _ = w.(writeDeadliner) // net/http clears the deadline after each request
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
			if s.opts.Metrics != nil && name != "" {
				s.opts.Metrics.HTTPRequests.WithLabelValues(name, strconv.Itoa(sw.code)).Inc()
			}
		}()
		if gate != nil && !passGate(gate, sw, r) {
			return
		}
		if rt.access == dataPlane {
			r = s.withClient(r)
		}
		h(sw, r)
	})
}

func asError(p any) error {
	if err, ok := p.(error); ok {
		return err
	}
	return nil
}

// writeDeadliner is net/http's response writer (http.ResponseController
// finds the same method, through Unwrap chains this code does not have).
type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool

	// The write deadline is moved to now+timeout before a write when
	// the last move is older than timeout/8: a response that makes
	// progress never times out, a client that stops reading is cut
	// after at most timeout, and a stream of small writes costs one
	// deadline update per timeout/8.
	dl      writeDeadliner
	timeout time.Duration
	lastSet time.Time
}

func (w *statusWriter) extend() {
	if w.dl == nil || w.timeout <= 0 {
		return
	}
	now := time.Now()
	if now.Sub(w.lastSet) < w.timeout/8 {
		return
	}
	w.lastSet = now
	_ = w.dl.SetWriteDeadline(now.Add(w.timeout)) // only fails on a closed connection, which the write reports
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	w.extend()
	return w.ResponseWriter.Write(b)
}

// Flush lets the proxy stream through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		w.wrote = true
		w.extend()
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	var conds []ReadyCondition
	if s.opts.Conditions != nil {
		conds = s.opts.Conditions(r.Context())
	}
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, readyBody{Status: "not ready", Reason: err.Error(), Conditions: conds})
			return
		}
	}
	writeJSON(w, http.StatusOK, readyBody{Status: "ready", Conditions: conds})
}
