package replica

import "github.com/kvrouter/kvrouter/grpcapi"

// serveGRPC serves the gRPC routing API on --grpc-addr (when set) with
// the HTTP API's client tokens, message limit and idle timeout.
func (r *Replica) serveGRPC() {
	if r.grpcLn == nil {
		return
	}
	cfg := r.cfg
	opts := grpcapi.Options{
		Router: r.router, Metrics: r.metrics, BlockSize: cfg.BlockSize, MaxRecvBytes: int(cfg.MaxBodyBytes),
		MaxConcurrentStreams: uint32(cfg.GRPCMaxStreams), StreamInFlight: cfg.GRPCStreamInFlight,
		IdleTimeout: cfg.HTTPIdleTimeout, HandshakeTimeout: cfg.HTTPReadHeaderTimeout,
		Ready: r.Ready, Log: r.base,
	}
	// A nil *httpapi.Tokens in an interface would not be nil.
	if r.apiTokens != nil {
		opts.APITokens = r.apiTokens
	}
	if r.adminTokens != nil {
		opts.AdminTokens = r.adminTokens
	}
	r.grpc = grpcapi.New(opts)
	ln := r.grpcLn
	go func() {
		if err := r.grpc.Serve(ln); err != nil {
			r.log.Error("gRPC server stopped", "err", err)
		}
	}()
}

// GRPCAddr is the gRPC API's address ("" without --grpc-addr).
func (r *Replica) GRPCAddr() string {
	if r.grpcLn == nil {
		return ""
	}
	return r.grpcLn.Addr().String()
}
