package grpcapi

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvrouter/kvrouter/routeapi"
)

// open reports whether a method is served without a token: the health
// service (probes), as /healthz and /readyz are over HTTP.
func open(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/")
}

// authorize checks the client token ("authorization: Bearer <token>")
// when APITokens is set; an admin token is accepted too.
func (s *Server) authorize(ctx context.Context, fullMethod string) error {
	if open(fullMethod) {
		return nil
	}
	return CheckToken(ctx, s.opts.APITokens, s.opts.AdminTokens)
}

// CheckToken is the client-token rule of a gRPC call ("authorization:
// Bearer <token>" metadata, one of api's or admin's; api nil: no token
// needed), shared by the routing API and the gateway endpoint picker.
func CheckToken(ctx context.Context, api, admin TokenSet) error {
	if api == nil {
		return nil
	}
	tok, presented := bearer(ctx)
	if presented && (api.Valid(tok) || (admin != nil && admin.Valid(tok))) {
		return nil
	}
	if presented {
		return status.Error(codes.Unauthenticated, routeapi.MsgTokenInvalid)
	}
	return status.Error(codes.Unauthenticated, routeapi.MsgTokenMissing)
}

// bearer is the token of the first "authorization: Bearer ..." entry.
func bearer(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return "", false
	}
	const prefix = "bearer "
	h := vals[0]
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(prefix):])
	return tok, tok != ""
}

func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
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

// count adds a call to kvrouter_grpc_requests_total. Refused calls are
// counted by the interceptors in front, so a flood of bad tokens shows.
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
