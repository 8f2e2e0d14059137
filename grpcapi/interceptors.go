package grpcapi

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// open reports whether a method is served without a token: the health
// service (probes), as /healthz and /readyz are over HTTP.
func open(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/")
}

// unaryRecover turns a panic into INTERNAL "internal error" (HTTP's 500
// body), logged, instead of a crashed replica.
func (s *Server) unaryRecover(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("handler panic", "method", info.FullMethod, "panic", p)
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
	}()
	return h(ctx, req)
}

func (s *Server) streamRecover(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("handler panic", "method", info.FullMethod, "panic", p)
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	return h(srv, ss)
}

func (s *Server) unaryCount(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	s.count(methodName(info.FullMethod), status.Code(err))
	return resp, err
}

func (s *Server) streamCount(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	err := h(srv, ss)
	s.count(methodName(info.FullMethod), status.Code(err))
	return err
}

// count adds a call to kvrouter_grpc_requests_total. Calls refused for
// their token are counted by tapAuth, so a flood of bad tokens shows.
func (s *Server) count(method string, code codes.Code) {
	if s.opts.Metrics != nil {
		s.opts.Metrics.GRPCRequests.WithLabelValues(method, code.String()).Inc()
	}
}

// methodName is "/kvrouter.v1.Router/Route" → "Route"; the health and
// reflection services keep their service name (a bounded set: gRPC
// answers unknown methods before any interceptor runs).
func methodName(full string) string {
	if rest, ok := strings.CutPrefix(full, "/"+ServiceName+"/"); ok {
		return rest
	}
	return strings.TrimPrefix(full, "/")
}
