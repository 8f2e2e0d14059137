package replica

import (
	"fmt"

	"github.com/kvrouter/kvrouter/eppapi"
)

// serveEPP serves the gateway endpoint picker on --epp-addr (when set):
// the proxy's request reading and answer tracking (r.api), the gRPC
// API's client tokens, the body limit.
func (r *Replica) serveEPP() error {
	if r.eppLn == nil {
		return nil
	}
	cfg := r.cfg
	tlsCfg, err := cfg.EPPTLS()
	if err != nil {
		return fmt.Errorf("endpoint picker: %w", err)
	}
	opts := eppapi.Options{
		API: r.api, Metrics: r.metrics, MaxBodyBytes: int(cfg.MaxBodyBytes), Fallbacks: cfg.EPPFallbackEndpoints,
		MaxConcurrentStreams: uint32(cfg.GRPCMaxStreams), IdleTimeout: cfg.HTTPIdleTimeout,
		HandshakeTimeout: cfg.HTTPReadHeaderTimeout, Ready: r.Ready, TLS: tlsCfg, Log: r.base,
	}
	// A nil *httpapi.Tokens in an interface would not be nil.
	if r.apiTokens != nil {
		opts.APITokens = r.apiTokens
	}
	if r.adminTokens != nil {
		opts.AdminTokens = r.adminTokens
	}
	r.epp = eppapi.New(opts)
	ln := r.eppLn
	go func() {
		if err := r.epp.Serve(ln); err != nil {
			r.log.Error("endpoint picker stopped", "err", err)
		}
	}()
	return nil
}

// EPPAddr is the endpoint picker's address ("" without --epp-addr).
func (r *Replica) EPPAddr() string {
	if r.eppLn == nil {
		return ""
	}
	return r.eppLn.Addr().String()
}
