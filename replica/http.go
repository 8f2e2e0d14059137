package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/kvrouter/kvrouter/connguard"
	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/httpapi"
	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/netpolicy"
	"github.com/kvrouter/kvrouter/parity"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// listen opens the HTTP (and admin) listeners, loads the token files and
// builds the worker-address policy, which needs the listeners' addresses
// to refuse them. It runs before anything registers workers.
func (r *Replica) listen() error {
	cfg := r.cfg
	var err error
	if cfg.AdminTokenFile != "" {
		if r.adminTokens, err = httpapi.LoadTokens(cfg.AdminTokenFile, r.log); err != nil {
			return fmt.Errorf("admin-token-file: %w", err)
		}
	}
	if cfg.APITokenFile != "" {
		if r.apiTokens, err = httpapi.LoadTokens(cfg.APITokenFile, r.log); err != nil {
			return fmt.Errorf("api-token-file: %w", err)
		}
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	r.ln = r.guardListener(ln, "http", cfg.HTTPMaxConns, cfg.HTTPMaxConnsPerClient, false, httpRefused)
	own := []net.Addr{ln.Addr()}
	if cfg.AdminAddr != "" {
		aln, err := net.Listen("tcp", cfg.AdminAddr)
		if err != nil {
			return fmt.Errorf("listen on admin-addr %s: %w", cfg.AdminAddr, err)
		}
		r.adminLn = httpapi.LimitListener(aln, httpapi.AdminMaxConns)
		own = append(own, aln.Addr())
		if r.adminTokens == nil && !isLoopbackAddr(aln.Addr()) {
			r.log.Warn("the admin listener is not on loopback and no --admin-token-file is set: whoever reaches it can register and remove workers",
				"admin_addr", aln.Addr().String())
		}
	}
	if cfg.GRPCAddr != "" {
		gln, err := net.Listen("tcp", cfg.GRPCAddr)
		if err != nil {
			return fmt.Errorf("listen on grpc-addr %s: %w", cfg.GRPCAddr, err)
		}
		r.grpcLn = r.guardListener(gln, "grpc", cfg.GRPCMaxConns, cfg.GRPCMaxConnsPerClient, true, nil)
		own = append(own, gln.Addr())
	}
	if cfg.EPPAddr != "" {
		eln, err := net.Listen("tcp", cfg.EPPAddr)
		if err != nil {
			return fmt.Errorf("listen on epp-addr %s: %w", cfg.EPPAddr, err)
		}
		r.eppLn = httpapi.LimitListener(eln, cfg.EPPMaxConns)
		own = append(own, eln.Addr())
	}
	allow, err := netpolicy.Parse(cfg.WorkerURLAllow)
	if err != nil {
		return err
	}
	var self []netip.AddrPort
	for _, a := range own {
		if ta, ok := a.(*net.TCPAddr); ok {
			self = append(self, ta.AddrPort())
		}
	}
	self = append(self, r.configuredSelf()...)
	r.policy = allow.WithSelf(self, localAddrs(r.log))
	r.resolve = netpolicy.Cache(netpolicy.LookupWith(nil, 2*time.Second), 30*time.Second, 4096, time.Now)
	r.rejects = &rejectLog{log: r.log, limit: loglimit.Limiter{Every: 10 * time.Second}}
	return nil
}

// localAddrs are this host's addresses: a listener bound to 0.0.0.0 or ::
// is reached through any of them.
func localAddrs(log *slog.Logger) []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		log.Warn("cannot list local addresses; only loopback counts as this router's own for 0.0.0.0 binds", "err", err)
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

func isLoopbackAddr(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

func (r *Replica) serveHTTP() error {
	cfg := r.cfg
	models, err := httpapi.LoadModels(httpapi.ModelSpec{
		Served: cfg.ServedModels, Tokenizer: cfg.Tokenizer, LoRAs: cfg.ServedLoRAs, Engine: cfg.TokenizerMode == "engine",
		ChatEngines: cfg.ChatEngines,
	})
	if err != nil {
		return fmt.Errorf("load tokenizers: %w", err)
	}
	if names := models.Names(); len(names) > 0 {
		r.log.Info("serving models", "models", names, "tokenizer_mode", cfg.TokenizerMode)
	}
	var tracker *parity.Tracker
	if cfg.Parity && (cfg.Proxy || cfg.EPPAddr != "") {
		// Every request whose predicted hit the engine's usage could
		// check reaches index trust, which keeps its own parity window
		// per rank (predicted hits the engine did not confirm).
		drift := parity.DriftFunc(func(k parity.RankKey, d parity.Drift) {
			r.router.ObserveParity(kv.WorkerWithDpRank{WorkerID: kv.WorkerID(k.Worker), DpRank: k.DpRank},
				d.RequestPredicted, d.RequestConfirmed, d.At)
		})
		if tracker, err = parity.New(cfg.ParityConfig(), drift); err != nil {
			return fmt.Errorf("parity: %w", err)
		}
	}
	api := httpapi.New(httpapi.Options{
		Parity: tracker,
		Models: models, TrustRequestChatTemplate: cfg.TrustRequestChatTemplate,
		TokenizeConcurrency: cfg.TokenizeConcurrency, TokenizeQueueTimeout: cfg.TokenizeQueueTimeout,
		Router: r.router, Metrics: r.metrics, BlockSize: cfg.BlockSize, MaxBodyBytes: cfg.MaxBodyBytes,
		Ready: r.Ready, Conditions: r.readyConditions, Proxy: cfg.Proxy, TrackOutputBlocks: cfg.RouterTrackOutputBlocks,
		OutputBlockDecayFloor: cfg.ProxyOutputBlockDecayFloor, MigrationLimit: migrationLimit(cfg.MigrationLimit), Pprof: cfg.Pprof, Log: r.base,
		ReplicaID: r.id, AdminTokens: r.adminTokens, APITokens: r.apiTokens, AdminSeparate: r.adminLn != nil,
		WorkerPolicy: r.policy, Resolve: r.resolve, WriteTimeout: cfg.HTTPWriteTimeout,
		SessionHeader: cfg.SessionHeader, SessionBodyField: cfg.SessionBodyField,
		SubscribeKVEvents: r.subscribeKVEvents(),
	})
	r.api = api
	r.http = r.httpServer(api.Handler())
	go r.serve(r.http, r.ln, "HTTP")
	if r.adminLn != nil {
		r.adminHTTP = r.httpServer(api.AdminHandler())
		go r.serve(r.adminHTTP, r.adminLn, "admin HTTP")
	}
	return nil
}

// httpServer has every timeout but the write timeout, which the API sets
// per write (a server-wide one would cut proxied streams).
func (r *Replica) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: r.cfg.HTTPReadHeaderTimeout,
		ReadTimeout:       r.cfg.HTTPReadTimeout,
		IdleTimeout:       r.cfg.HTTPIdleTimeout,
		MaxHeaderBytes:    httpapi.MaxHeaderBytes,
		// The API marks a connection authenticated (connguard) and the
		// hook arms the unauthenticated idle limit between requests.
		ConnContext: connguard.NewContext,
		ConnState:   connguard.HTTPConnState,
	}
}

func (r *Replica) serve(srv *http.Server, ln net.Listener, what string) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		r.log.Error(what+" server stopped", "err", err)
	}
}

// AdminAddr is the admin listener's address ("" without --admin-addr).
func (r *Replica) AdminAddr() string {
	if r.adminLn == nil {
		return ""
	}
	return r.adminLn.Addr().String()
}

// admitHeartbeat applies the worker-address policy to what a heartbeat
// asks the router to connect to: its URL and, when ZMQ ingestion is on,
// its KV-event and replay endpoints. A refusal is counted
// (worker_rejected{reason}) and logged at most every 10 s.
func (r *Replica) admitHeartbeat(hb events.Heartbeat, zmq bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	reason := ""
	err := r.policy.CheckWorkerURL(ctx, hb.URL, r.resolve)
	if err != nil {
		reason = "url_" + netpolicy.Reason(err)
	} else if zmq {
		ranks := int(max(hb.DataParallelSize, 1))
		for _, ep := range []string{hb.KVEventsEndpoint, hb.ReplayEndpoint} {
			if err = r.policy.CheckZMQEndpoint(ctx, ep, ranks, r.resolve); err != nil {
				reason = "zmq_endpoint_" + netpolicy.Reason(err)
				break
			}
		}
	}
	if err == nil {
		return true
	}
	r.metrics.WorkerRejected(reason)
	r.rejects.warn("worker heartbeat refused", "worker", hb.WorkerID, "reason", reason, "err", err)
	return false
}

// subscribeKVEvents is what POST /workers calls for a kv_events_endpoint:
// the same subscription a heartbeat announcing it starts (nil without ZMQ
// ingestion).
func (r *Replica) subscribeKVEvents() func(zmqevents.WorkerEndpoint) error {
	if r.bus == nil || r.bus.zmq == nil {
		return nil
	}
	return r.bus.zmq.subscribe
}

// checkStaticWorker applies the policy to a --static-workers URL.
func (r *Replica) checkStaticWorker(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.policy.CheckWorkerURL(ctx, url, r.resolve)
}

// rejectLog logs at most one refusal per period and counts the others, so
// a flood of bad heartbeats cannot flood the log.
type rejectLog struct {
	log   *slog.Logger
	limit loglimit.Limiter
}

func (l *rejectLog) warn(msg string, args ...any) {
	if ok, n := l.limit.Allow(time.Now()); ok {
		l.log.Warn(msg, append(args, "similar_suppressed", n)...)
	}
}

// migrationLimit is --migration-limit as httpapi.Options takes it: the
// flag's 0 turns migration off, which Options spells negative (its 0 is
// the default).
func migrationLimit(flag int) int {
	if flag == 0 {
		return -1
	}
	return flag
}
