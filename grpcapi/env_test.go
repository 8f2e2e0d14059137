package grpcapi_test

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/grpcapi"
	"github.com/kvrouter/kvrouter/httpapi"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kvclient"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/metrics"
)

// env is one in-process router served over both APIs on real loopback
// sockets.
type env struct {
	router  *actors.Router
	metrics *metrics.Router
	grpc    *grpcapi.Server
	addr    string // the gRPC listener
	httpURL string
	client  *kvclient.Client
}

type envOptions struct {
	workers      int
	maxRecvBytes int
	tokens       grpcapi.TokenSet
	adminTokens  grpcapi.TokenSet
	ready        func() error
	router       func(*actors.Config)
	roles        map[int]messages.WorkerRole // worker id → role (default both)
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	cfg := actors.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Shards = 2
	if o.router != nil {
		o.router(&cfg)
	}
	r, err := actors.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	for i := 1; i <= o.workers; i++ {
		if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: uint64(i), DataParallelSize: 1, Role: o.roles[i]}, true); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "workers registered", func() bool {
		reg, err := r.Registry(context.Background())
		return err == nil && len(reg.Workers) == o.workers
	})
	if o.maxRecvBytes == 0 {
		o.maxRecvBytes = 1 << 20
	}
	m := metrics.New()
	log := slog.New(slog.DiscardHandler)
	gs := grpcapi.New(grpcapi.Options{Router: r, Metrics: m, BlockSize: cfg.BlockSize, MaxRecvBytes: o.maxRecvBytes,
		APITokens: o.tokens, AdminTokens: o.adminTokens, Ready: o.ready, Log: log})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gs.Stop(ctx)
	})
	hopts := httpapi.Options{Router: r, Metrics: m, BlockSize: cfg.BlockSize, MaxBodyBytes: int64(o.maxRecvBytes), Log: log}
	if tok, ok := o.tokens.(*httpapi.Tokens); ok {
		hopts.APITokens = tok
	}
	hs := httptest.NewServer(httpapi.New(hopts).Handler())
	t.Cleanup(hs.Close)
	c, err := kvclient.Dial(ln.Addr().String(), kvclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &env{router: r, metrics: m, grpc: gs, addr: ln.Addr().String(), httpURL: hs.URL, client: c}
}
