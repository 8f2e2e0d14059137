package httpapi

import (
	"net/http"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/routeapi"
)

// withClient names the client of a data-plane request for the router (the
// per-client active-request bound): its bearer token when tokens are
// checked (the gate has let only valid ones through), else its address.
func (s *Server) withClient(r *http.Request) *http.Request {
	client := ""
	if s.opts.APITokens != nil {
		if tok, ok := bearer(r); ok {
			client = routeapi.TokenClient(tok)
		}
	}
	if client == "" {
		client = routeapi.AddrClient(r.RemoteAddr)
	}
	return r.WithContext(actors.WithClient(r.Context(), client))
}
