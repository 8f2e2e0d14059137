package grpcapi

import (
	"context"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/kvrouter/kvrouter/routeapi"
)

// clientOf names the caller for the per-client active-request bound, as
// over HTTP: its bearer token when tokens are checked, else its address.
func (s *Server) clientOf(ctx context.Context) string {
	if s.opts.APITokens != nil {
		md, _ := metadata.FromIncomingContext(ctx)
		if tok, ok := bearer(md); ok {
			return routeapi.TokenClient(tok)
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return routeapi.AddrClient(p.Addr.String())
	}
	return ""
}
