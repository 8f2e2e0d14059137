package replica

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kvclient"
	"github.com/kvrouter/kvrouter/messages"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// --grpc-addr serves the gRPC API with the HTTP API's client token,
// reports readiness through the health service, and stops with the
// replica.
func TestReplicaServesGRPC(t *testing.T) {
	const token = "grpc-test-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "api-tokens")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.APITokenFile = tokenFile
	cfg.ZMQEvents = false
	ctx := context.Background()
	r, err := Start(ctx, cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	addr := r.GRPCAddr()
	if addr == "" {
		t.Fatal("no gRPC address with --grpc-addr")
	}
	c, err := kvclient.Dial(addr, kvclient.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	health := healthpb.NewHealthClient(c.Conn())
	testutil.Eventually(t, 30*time.Second, "health SERVING", func() bool {
		res, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "kvrouter.v1.Router"})
		return err == nil && res.Status == healthpb.HealthCheckResponse_SERVING
	})
	if err := r.Router().RegisterWorker(&messages.WorkerHeartbeat{WorkerId: 7, DataParallelSize: 1}, true); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "a route to worker 7", func() bool {
		res, err := c.Route(ctx, &pb.RouteRequest{TokenIds: []uint32{1, 2, 3}, UpdateStates: new(false)})
		return err == nil && res.WorkerId == 7
	})
	anon, err := kvclient.Dial(addr, kvclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Workers(ctx); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Workers without a token: %v, want Unauthenticated", err)
	}

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	defer ccancel()
	if _, err := c.Workers(cctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("Workers after shutdown: %v, want Unavailable", err)
	}
}
