package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvrouter/kvrouter/kvclient"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// The APIs a route load can go through.
const (
	// APIJSON: POST /route (then /free) over HTTP/1.1 keep-alive, one
	// connection per sender.
	APIJSON = "json"
	// APIGRPC: unary Route (then Free) calls of the gRPC API, the senders
	// sharing GRPCConns connections.
	APIGRPC = "grpc"
	// APIGRPCStream: Route (then Free) over one Lifecycle stream per
	// gRPC connection, the senders sharing the streams.
	APIGRPCStream = "grpc-stream"
)

// ParseAPIs parses a comma-separated list of APIs ("json,grpc").
func ParseAPIs(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		switch a {
		case APIJSON, APIGRPC, APIGRPCStream:
		default:
			return nil, fmt.Errorf("unknown API %q: want json, grpc or grpc-stream", a)
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out, nil
}

// UsesGRPC reports whether any of apis is a gRPC one.
func UsesGRPC(apis []string) bool {
	for _, a := range apis {
		if a != APIJSON {
			return true
		}
	}
	return false
}

// grpcPool is the connections (and, for the stream API, one Lifecycle
// stream each) a gRPC run's senders share.
type grpcPool struct {
	clients []*kvclient.Client
	streams []*kvclient.Stream
}

func (t *RouteTarget) dialGRPC(ctx context.Context, stream bool) (*grpcPool, error) {
	if t.cfg.GRPCAddr == "" {
		return nil, errors.New("the gRPC API needs the router's gRPC address (--grpc-addr)")
	}
	p := &grpcPool{}
	for range max(t.cfg.GRPCConns, 1) {
		c, err := kvclient.Dial(t.cfg.GRPCAddr, kvclient.Options{Token: cmp.Or(t.cfg.APIToken, t.cfg.AdminToken)})
		if err != nil {
			p.close()
			return nil, err
		}
		p.clients = append(p.clients, c)
		if stream {
			s, err := c.OpenStream(ctx)
			if err != nil {
				p.close()
				return nil, fmt.Errorf("open a lifecycle stream: %w", err)
			}
			p.streams = append(p.streams, s)
		}
	}
	return p, nil
}

func (p *grpcPool) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range p.streams {
		_ = s.Close(ctx) // the run is over: a stream that fails to close has nothing left to report
	}
	for _, c := range p.clients {
		_ = c.Close()
	}
}

// runGRPC offers the load through the gRPC API (unary calls, or the
// Lifecycle stream).
func (t *RouteTarget) runGRPC(ctx context.Context, cfg OpenLoopConfig, step int, stream bool) (OpenLoopResult, error) {
	pool, err := t.dialGRPC(ctx, stream)
	if err != nil {
		return OpenLoopResult{}, err
	}
	defer pool.close()
	// One sample call per connection first: connections are lazy, and
	// the first call's handshake must not land in the measurement.
	for _, c := range pool.clients {
		if _, err := c.Route(ctx, &pb.RouteRequest{TokenIds: t.promptTokens[0], UpdateStates: new(false)}); err != nil {
			return OpenLoopResult{}, fmt.Errorf("gRPC sample decision: %w", err)
		}
	}
	encoded := make([]EncodedRoute, len(t.promptTokens))
	for i, p := range t.promptTokens {
		encoded[i] = NewEncodedRoute(p)
	}
	return RunOpenLoop(ctx, cfg, func(i int) Sender {
		s := &grpcSender{t: t, step: step, client: pool.clients[i%len(pool.clients)], encoded: encoded}
		if stream {
			s.stream = pool.streams[i%len(pool.streams)]
		}
		return s
	})
}

// grpcSender is one sender's decisions over the gRPC API.
type grpcSender struct {
	t      *RouteTarget
	step   int
	client *kvclient.Client
	stream *kvclient.Stream // nil: unary calls
	id     []byte
	// Unary calls send the prompts encoded once (as the JSON sender
	// sends pre-serialized token arrays).
	encoded []EncodedRoute
	buf     []byte
	res     pb.RouteResponse
}

func (s *grpcSender) Close() {}

// Send makes one decision: the route's answer is the latency end point;
// with update states the request is then freed before the sender takes
// its next request (as the JSON sender does).
func (s *grpcSender) Send(ctx context.Context, seq int) (time.Time, string) {
	req := &pb.RouteRequest{TokenIds: s.t.promptTokens[seq%len(s.t.promptTokens)], UpdateStates: new(s.t.cfg.UpdateStates)}
	if s.t.cfg.UpdateStates {
		s.id = s.t.appendID(s.id[:0], s.step, seq)
		req.RequestId = string(s.id)
	}
	cctx, cancel := context.WithTimeout(ctx, s.t.cfg.Timeout)
	defer cancel()
	var res *pb.RouteResponse
	var err error
	if s.stream != nil {
		res, err = s.stream.Route(cctx, req)
	} else {
		s.buf = s.encoded[seq%len(s.encoded)].Append(s.buf[:0], req.RequestId, s.t.cfg.UpdateStates)
		s.res.Reset()
		res = &s.res
		err = RouteEncoded(cctx, s.client.Conn(), s.buf, res)
	}
	done := time.Now()
	if class := s.t.classifyGRPC(ctx, "route", err); class != "" {
		return done, class
	}
	if res.GetWorkerId() == 0 {
		s.t.noteFirst(fmt.Sprintf("route: answer without worker_id: %v", res))
		return done, "route: answer without worker_id"
	}
	if !s.t.cfg.UpdateStates {
		return done, ""
	}
	if s.stream != nil {
		err = s.stream.Free(cctx, req.RequestId)
	} else {
		err = s.client.Free(cctx, req.RequestId)
	}
	return done, s.t.classifyGRPC(ctx, "free", err)
}

// classifyGRPC names a failed gRPC call's outcome ("" = OK) and
// remembers the first failure's text.
func (t *RouteTarget) classifyGRPC(ctx context.Context, call string, err error) string {
	if err == nil {
		return ""
	}
	c := call + " " + status.Code(err).String()
	switch {
	case ctx.Err() != nil:
		return ClassCanceled
	case status.Code(err) == codes.DeadlineExceeded:
		c = ClassTimeout
	}
	t.noteFirst(call + ": " + err.Error())
	return c
}
