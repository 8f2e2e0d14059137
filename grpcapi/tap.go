package grpcapi

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/connguard"
	"github.com/kvrouter/kvrouter/routeapi"
)

// tapAuth checks a call's token when its headers arrive (grpc's
// InTapHandle): before the stream exists and before any byte of its
// message is read, so a call without a valid token costs no buffer and
// no decode. A refused call is counted and answered UNAUTHENTICATED; on
// a guarded listener (connguard) a connection that never carried an
// authenticated call is closed shortly after (the refusal is written
// first). A call that passes marks its connection authenticated.
func (s *Server) tapAuth(ctx context.Context, info *tap.Info) (context.Context, error) {
	if open(info.FullMethodName) {
		return ctx, nil
	}
	conn := s.conn(ctx)
	err := s.checkToken(info.Header)
	if err == nil {
		if conn != nil {
			conn.MarkAuthenticated()
		}
		return ctx, nil
	}
	s.count(s.knownMethod(info.FullMethodName), codes.Unauthenticated)
	if conn != nil {
		// A connection that carried authenticated calls may be shared
		// (a gateway multiplexing clients): only the call is refused.
		conn.AuthFailed(!conn.Authenticated())
	}
	return ctx, err
}

// checkToken checks the client token ("authorization: Bearer <token>")
// when APITokens is set; an admin token is accepted too.
func (s *Server) checkToken(md metadata.MD) error {
	return checkTokens(md, s.opts.APITokens, s.opts.AdminTokens)
}

// CheckToken is the client-token rule of a gRPC call (one of api's or
// admin's; api nil: no token needed), for a gRPC service this package
// does not serve: the gateway endpoint picker checks its calls with it.
func CheckToken(ctx context.Context, api, admin TokenSet) error {
	md, _ := metadata.FromIncomingContext(ctx)
	return checkTokens(md, api, admin)
}

func checkTokens(md metadata.MD, api, admin TokenSet) error {
	if api == nil {
		return nil
	}
	tok, presented := bearer(md)
	if presented && (api.Valid(tok) || (admin != nil && admin.Valid(tok))) {
		return nil
	}
	if presented {
		return status.Error(codes.Unauthenticated, routeapi.MsgTokenInvalid)
	}
	return status.Error(codes.Unauthenticated, routeapi.MsgTokenMissing)
}

// bearer is the token of the first "authorization: Bearer ..." entry.
func bearer(md metadata.MD) (string, bool) {
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

// conn is the guarded connection a call came on (nil: the listener is not
// a connguard.Listener).
func (s *Server) conn(ctx context.Context) *connguard.Conn {
	gl := s.guard.Load()
	if gl == nil {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	return gl.Lookup(p.Addr)
}

// knownMethod bounds the method label of a call refused before gRPC
// looked its method up: a registered method keeps its name, anything
// else is "unknown".
func (s *Server) knownMethod(full string) string {
	if s.methods[full] {
		return methodName(full)
	}
	return "unknown"
}

// decodeFailures holds the decode error of a kvrouter.v1 message the
// codec could not decode, from the codec's Unmarshal to the wrapper that
// called it (invalidArgumentOnDecode, streamDecodeStatus), which takes it
// out at once: grpc-go answers a codec error itself with INTERNAL before
// any handler or interceptor could change the code, so the codec reports
// success and the wrapper answers INVALID_ARGUMENT instead. Bound: one
// entry per message being received.
var decodeFailures sync.Map // proto.Message pointer → error

// deferDecodeError keeps err for v's receiver when v is one of this
// service's messages (their receivers take it back); other messages keep
// grpc-go's handling.
func deferDecodeError(v any, err error) bool {
	m, ok := v.(proto.Message)
	if !ok || !strings.HasPrefix(string(proto.MessageName(m)), "kvrouter.v1.") {
		return false
	}
	decodeFailures.Store(v, err)
	return true
}

// decodeStatus is err, or INVALID_ARGUMENT when the message v just
// received did not decode.
func decodeStatus(v any, err error) error {
	if failed, ok := decodeFailures.LoadAndDelete(v); ok {
		if err != nil {
			return err
		}
		return status.Error(codes.InvalidArgument, "invalid message: "+failed.(error).Error())
	}
	return err
}

// invalidArgumentOnDecode returns a copy of desc whose unary handlers
// answer a message that fails to decode with INVALID_ARGUMENT (gRPC
// decodes a unary request inside the generated handler, before the
// interceptors).
func invalidArgumentOnDecode(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	out := *desc
	out.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		out.Methods[i] = grpc.MethodDesc{MethodName: m.MethodName, Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error { return decodeStatus(v, dec(v)) }, ic)
		}}
	}
	return &out
}

// streamDecodeStatus makes a streaming handler's RecvMsg report a message
// that fails to decode as INVALID_ARGUMENT.
func streamDecodeStatus(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, decodeStream{ss})
}

type decodeStream struct{ grpc.ServerStream }

func (d decodeStream) RecvMsg(m any) error { return decodeStatus(m, d.ServerStream.RecvMsg(m)) }
