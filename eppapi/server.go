// Package eppapi makes a replica a Gateway API Inference Extension
// endpoint picker: an Envoy external processor
// (envoy.service.ext_proc.v3.ExternalProcessor) that reads each
// request's OpenAI body, makes the same recorded decision as /route and
// the proxy (httpapi.Inference), names the chosen engine in the
// x-gateway-destination-endpoint header and the envoy.lb dynamic
// metadata, and follows the answer through the gateway to free the
// request (docs/gateway.md).
//
// Who reaches the port: the gateway (Envoy) alone. Bounds: the
// listener's connection cap is the caller's; a connection carries at
// most MaxConcurrentStreams requests at once (one ext_proc stream per
// HTTP request); a request body is read up to MaxBodyBytes (413 past
// it); a streamed answer's line is kept up to 1 MiB between chunks. With
// APITokens set every stream needs "authorization: Bearer <token>"
// metadata (Envoy's grpc_service initial_metadata); with TLS set the
// port speaks TLS, mutual when TLS verifies client certificates.
package eppapi

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"time"

	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/kvrouter/kvrouter/grpcapi"
	"github.com/kvrouter/kvrouter/httpapi"
	"github.com/kvrouter/kvrouter/internal/grpcserve"
	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/metrics"
)

// Options configures the endpoint picker.
type Options struct {
	// API reads, routes and tracks the requests (the proxy's rules).
	API     *httpapi.Server
	Metrics *metrics.Router // nil: no counting
	// MaxBodyBytes bounds a request body (--max-body-bytes). Default
	// 8 MiB.
	MaxBodyBytes int
	// Fallbacks is how many endpoints after the chosen one the picker
	// names for the gateway's retries (--epp-fallback-endpoints).
	Fallbacks int
	// MaxConcurrentStreams bounds the requests in flight on one
	// connection. Default 1024.
	MaxConcurrentStreams uint32
	// IdleTimeout closes a connection without streams this long (default
	// 2 minutes); HandshakeTimeout bounds a new connection's handshake
	// (default 10 s).
	IdleTimeout, HandshakeTimeout time.Duration
	// Ready reports why the replica should not get traffic (nil: ready).
	Ready func() error
	// APITokens, when set, is required on every ext_proc stream (an
	// admin token is accepted too); the health service stays open.
	APITokens, AdminTokens grpcapi.TokenSet
	// TLS, when set, is the port's TLS configuration.
	TLS *tls.Config
	Log *slog.Logger
}

// Health service names of the protocol: liveness is SERVING while the
// process answers; readiness and the ext_proc service follow Ready.
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
	ServiceName     = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// Server is one replica's endpoint picker.
type Server struct {
	extproc.UnimplementedExternalProcessorServer
	opts Options
	log  *slog.Logger
	warn loglimit.Limiter
	grpc *grpc.Server
	life *grpcserve.Lifecycle
}

// New builds the picker; Serve starts it.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 8 << 20
	}
	if opts.MaxConcurrentStreams == 0 {
		opts.MaxConcurrentStreams = 1024
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 2 * time.Minute
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	s := &Server{opts: opts, log: opts.Log.With("component", "eppapi"), warn: loglimit.Limiter{Every: 10 * time.Second}}
	so := []grpc.ServerOption{
		// A body arrives in pieces Envoy cuts; one message is at most a
		// piece, or a whole buffered body.
		grpc.MaxRecvMsgSize(opts.MaxBodyBytes + 64<<10),
		grpc.MaxConcurrentStreams(opts.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(1 << 20),
		grpc.ConnectionTimeout(opts.HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: opts.IdleTimeout, Time: 30 * time.Second, Timeout: 20 * time.Second}),
		grpc.ChainStreamInterceptor(s.streamRecover, s.streamAuth),
	}
	if opts.TLS != nil {
		so = append(so, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	s.grpc = grpc.NewServer(so...)
	extproc.RegisterExternalProcessorServer(s.grpc, s)
	s.life = grpcserve.New("epp", s.grpc, opts.Ready, []string{"", HealthReadiness, ServiceName}, []string{HealthLiveness})
	return s
}

// Serve serves on ln until Stop; it returns nil after Stop.
func (s *Server) Serve(ln net.Listener) error {
	return s.life.Serve(ln)
}

// Stop reports NOT_SERVING, lets requests in flight finish until ctx
// ends, then closes every connection (each stream's request is freed as
// its stream ends).
func (s *Server) Stop(ctx context.Context) error { return s.life.Stop(ctx) }

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !strings.HasPrefix(info.FullMethod, "/grpc.health.v1.Health/") {
		if err := grpcapi.CheckToken(ss.Context(), s.opts.APITokens, s.opts.AdminTokens); err != nil {
			s.count("unauthenticated")
			return err
		}
	}
	return h(srv, ss)
}

// streamRecover turns a panic into an error for that stream, logged,
// instead of a crashed replica (the stream's request is freed by its
// deferred end).
func (s *Server) streamRecover(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("ext_proc handler panic", "method", info.FullMethod, "panic", p)
			err = errInternal
		}
	}()
	return h(srv, ss)
}

func (s *Server) count(outcome string) {
	if s.opts.Metrics != nil {
		s.opts.Metrics.EPPRequests.WithLabelValues(outcome).Inc()
	}
}

func (s *Server) countEnd(end string) {
	if s.opts.Metrics != nil {
		s.opts.Metrics.EPPAnswers.WithLabelValues(end).Inc()
	}
}
