// Package kvclient is the Go client of the router's gRPC API
// (kvrouter.v1.Router, served with `kvrouter serve --grpc-addr`): what a
// frontend imports to route requests and report their lifecycle. Errors
// are gRPC status errors carrying the router's messages (the HTTP API's
// texts); status.Code(err) tells them apart, and QueueFullOf reads the
// queue figures of a RESOURCE_EXHAUSTED refusal.
//
//	c, err := kvclient.Dial("router:9090", kvclient.Options{Token: tok})
//	res, err := c.Route(ctx, &kvrouterv1.RouteRequest{RequestId: id, TokenIds: prompt})
//	... serve the request on res.WorkerId / res.DpRank ...
//	err = c.Free(ctx, id)
//
// Stream multiplexes many concurrent callers' calls over one Lifecycle
// stream (one HTTP/2 stream instead of a call each).
package kvclient

import (
	"context"
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// Options configures Dial.
type Options struct {
	// Token is sent as "authorization: Bearer <token>" on every call
	// (the router's --api-token-file); empty: none.
	Token string
	// TLS, when set, secures the connection (for a router behind a
	// TLS-terminating proxy or mesh); nil: plaintext.
	TLS *tls.Config
	// MaxRecvBytes bounds an answer (default 64 MiB: a large fleet's
	// Workers answer).
	MaxRecvBytes int
	// DialOptions are added last (interceptors, keepalive, ...).
	DialOptions []grpc.DialOption
}

// Client calls one router (or a load balancer in front of several).
type Client struct {
	conn *grpc.ClientConn
	rc   pb.RouterClient
}

// Dial connects lazily to target (host:port, or any gRPC target such as
// dns:///router:9090); the first call connects.
func Dial(target string, opts Options) (*Client, error) {
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	if opts.MaxRecvBytes <= 0 {
		opts.MaxRecvBytes = 64 << 20
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(opts.MaxRecvBytes), grpc.ForceCodecV2(newClientCodec())),
	}
	if opts.Token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearerToken{token: opts.Token, secure: opts.TLS != nil}))
	}
	conn, err := grpc.NewClient(target, append(dial, opts.DialOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("kvclient: dial %s: %w", target, err)
	}
	return &Client{conn: conn, rc: pb.NewRouterClient(conn)}, nil
}

// bearerToken sends the client token on every call.
type bearerToken struct {
	token  string
	secure bool
}

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false without TLS: a router on a private
// network or loopback takes its token over plaintext, as over HTTP.
func (b bearerToken) RequireTransportSecurity() bool { return b.secure }

// Close closes the connection (and every Stream on it).
func (c *Client) Close() error { return c.conn.Close() }

// Conn is the underlying connection (for the health service, say).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// RouterClient is the generated client, for calls with options.
func (c *Client) RouterClient() pb.RouterClient { return c.rc }

// Route picks a worker rank for a prompt.
func (c *Client) Route(ctx context.Context, req *pb.RouteRequest) (*pb.RouteResponse, error) {
	return c.rc.Route(ctx, req)
}

// PrefillDone says request id produced its first token.
func (c *Client) PrefillDone(ctx context.Context, id string) error {
	_, err := c.rc.PrefillDone(ctx, &pb.RequestRef{RequestId: id})
	return err
}

// Free says request id finished or failed.
func (c *Client) Free(ctx context.Context, id string) error {
	_, err := c.rc.Free(ctx, &pb.RequestRef{RequestId: id})
	return err
}

// OverlapScores is every worker rank's cached prefix of a prompt.
func (c *Client) OverlapScores(ctx context.Context, tokens []uint32, lora string) (*pb.OverlapScoresResponse, error) {
	return c.rc.OverlapScores(ctx, &pb.TokensRequest{TokenIds: tokens, LoraName: lora})
}

// PotentialLoads is what a prompt would add to every rank's load.
func (c *Client) PotentialLoads(ctx context.Context, tokens []uint32, lora string) (*pb.PotentialLoadsResponse, error) {
	return c.rc.PotentialLoads(ctx, &pb.TokensRequest{TokenIds: tokens, LoraName: lora})
}

// Workers is the router's view of the fleet.
func (c *Client) Workers(ctx context.Context) (*pb.WorkersResponse, error) {
	return c.rc.Workers(ctx, &pb.WorkersRequest{})
}

// IndexDigest is the router's index digest (WorkersResponse.index_digest):
// equal on replicas that applied the same events. It walks the router's
// whole index, during which its shards answer no lookup; the router spaces
// such walks out (at most a tenth of the shards' time).
func (c *Client) IndexDigest(ctx context.Context) (uint64, error) {
	res, err := c.rc.Workers(ctx, &pb.WorkersRequest{IndexDigest: true})
	if err != nil {
		return 0, err
	}
	return res.IndexDigest, nil
}

// QueueFullOf is the queue figures of a route refused because every
// eligible worker's queue was full (nil for any other error).
func QueueFullOf(err error) *pb.QueueFull {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if q, ok := d.(*pb.QueueFull); ok {
			return q
		}
	}
	return nil
}
