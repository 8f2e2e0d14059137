// Package grpcapi serves the kvrouter.v1 gRPC API (messages/kvrouterv1):
// the JSON routing API's calls over gRPC, and a Lifecycle stream that
// carries many calls. It calls the same router entry points as httpapi
// with the same rules and error messages (routeapi); status codes follow
// HTTP's. The standard health service reports the replica's readiness;
// server reflection is on (behind the client token, like the data plane).
//
// Bounds: a message larger than MaxRecvBytes (--max-body-bytes) is
// refused, a connection carries at most MaxConcurrentStreams calls at
// once, a Lifecycle stream at most StreamInFlight calls in flight (the
// stream stops reading until one finishes), and clients that ping more
// often than every 10 s are cut (keepalive enforcement). The listener's
// connection caps are the caller's (connguard.Listener: total and per
// client; a call that fails the token check closes its connection).
package grpcapi

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/connguard"
	"github.com/kvrouter/kvrouter/internal/grpcserve"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
	"github.com/kvrouter/kvrouter/metrics"
)

// TokenSet is a set of bearer tokens (httpapi.Tokens).
type TokenSet interface{ Valid(token string) bool }

// Options configures the gRPC server.
type Options struct {
	Router    *actors.Router
	Metrics   *metrics.Router // nil: no counting
	BlockSize int
	// MaxRecvBytes bounds a received message (--max-body-bytes: the same
	// bound as an HTTP body). Default 8 MiB.
	MaxRecvBytes int
	// MaxConcurrentStreams bounds the calls in flight on one connection
	// (HTTP/2 streams). Default 1024.
	MaxConcurrentStreams uint32
	// StreamInFlight bounds the calls in flight on one Lifecycle stream.
	// Default 1024.
	StreamInFlight int
	// IdleTimeout closes a connection without calls this long (default
	// 2 minutes); HandshakeTimeout bounds a new connection's handshake
	// (default 10 s).
	IdleTimeout, HandshakeTimeout time.Duration
	// Ready reports why the replica should not get traffic (nil: ready);
	// the health service reports it. Nil: always ready.
	Ready func() error
	// APITokens, when set, is required on every call but the health
	// service's, as "authorization: Bearer <token>" metadata; an admin
	// token is accepted too (as over HTTP).
	APITokens, AdminTokens TokenSet
	Log                    *slog.Logger
}

// ServiceName is the routing service's name (its health is reported
// under it and under "").
const ServiceName = "kvrouter.v1.Router"

// Server is the gRPC API of one replica.
type Server struct {
	opts Options
	log  *slog.Logger
	grpc *grpc.Server
	life *grpcserve.Lifecycle
	// guard is the listener Serve was given when it is a
	// connguard.Listener (tapAuth closes and marks its connections).
	guard atomic.Pointer[connguard.Listener]
	// methods are the registered methods' full names (a refused call's
	// label is one of them or "unknown").
	methods map[string]bool
}

// New builds the server; Serve starts it.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.MaxRecvBytes <= 0 {
		opts.MaxRecvBytes = 8 << 20
	}
	if opts.MaxConcurrentStreams == 0 {
		opts.MaxConcurrentStreams = 1024
	}
	if opts.StreamInFlight <= 0 {
		opts.StreamInFlight = 1024
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 2 * time.Minute
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	s := &Server{opts: opts, log: opts.Log.With("component", "grpcapi")}
	s.grpc = grpc.NewServer(
		grpc.ForceServerCodecV2(newRouteCodec()),
		grpc.MaxRecvMsgSize(opts.MaxRecvBytes),
		// A Workers answer for a large fleet outgrows a prompt.
		grpc.MaxSendMsgSize(max(opts.MaxRecvBytes, 64<<20)),
		grpc.MaxConcurrentStreams(opts.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(1<<20),
		grpc.ConnectionTimeout(opts.HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: opts.IdleTimeout,
			// Dead peers are found within a minute and their streams freed.
			Time: 30 * time.Second, Timeout: 20 * time.Second,
		}),
		// The token is checked when a call's headers arrive, before its
		// message is read (tap.go).
		grpc.InTapHandle(s.tapAuth),
		grpc.ChainUnaryInterceptor(s.unaryCount, s.unaryRecover),
		grpc.ChainStreamInterceptor(s.streamCount, s.streamRecover, streamDecodeStatus),
	)
	s.grpc.RegisterService(invalidArgumentOnDecode(&pb.Router_ServiceDesc), &service{s: s})
	s.life = grpcserve.New("grpc", s.grpc, opts.Ready, []string{"", ServiceName}, nil)
	reflection.Register(s.grpc)
	s.methods = map[string]bool{}
	for name, info := range s.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			s.methods["/"+name+"/"+m.Name] = true
		}
	}
	return s
}

// Serve serves on ln until Stop; it returns nil after Stop.
func (s *Server) Serve(ln net.Listener) error {
	if gl, ok := ln.(*connguard.Listener); ok {
		s.guard.Store(gl)
	}
	return s.life.Serve(ln)
}

// Stop reports NOT_SERVING, lets calls in flight finish until ctx ends,
// then closes every connection (a Lifecycle stream a client keeps open
// would otherwise hold the shutdown forever).
func (s *Server) Stop(ctx context.Context) error { return s.life.Stop(ctx) }
