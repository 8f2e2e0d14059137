package grpcapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

func prompt(n int, base uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

// Every RPC against a real router over a real socket.
func TestEveryRPC(t *testing.T) {
	e := newEnv(t, envOptions{workers: 2})
	c, ctx := e.client, context.Background()

	res, err := c.Route(ctx, &pb.RouteRequest{RequestId: "r1", TokenIds: prompt(40, 1)})
	if err != nil || res.RequestId != "r1" || (res.WorkerId != 1 && res.WorkerId != 2) {
		t.Fatalf("route: %v %v", res, err)
	}
	if res.IndexTrust != "exact" {
		t.Errorf("route to a healthy rank: index_trust %q, want exact", res.IndexTrust)
	}
	gen, err := c.Route(ctx, &pb.RouteRequest{TokenIds: prompt(3, 1)})
	if err != nil || !strings.HasPrefix(gen.RequestId, "kvr-") {
		t.Fatalf("generated id: %v %v", gen, err)
	}
	q, err := c.Route(ctx, &pb.RouteRequest{TokenIds: prompt(3, 1), UpdateStates: new(false)})
	if err != nil || q.RequestId != "" {
		t.Fatalf("query-only route: %v %v", q, err)
	}
	loads, err := c.PotentialLoads(ctx, prompt(32, 1), "")
	if err != nil || len(loads.Loads) != 2 {
		t.Fatalf("potential loads: %v %v", loads, err)
	}
	active := uint32(0)
	for _, l := range loads.Loads {
		active += l.ActiveRequests
	}
	if active != 2 {
		t.Fatalf("active requests %d, want the 2 recorded routes", active)
	}
	scores, err := c.OverlapScores(ctx, prompt(32, 1), "")
	if err != nil || scores.RequestBlocks != 2 {
		t.Fatalf("overlap scores: %v %v", scores, err)
	}
	// One row per registered rank, in rank order.
	if rows := scores.GetScores(); len(rows) != 2 || rows[0].GetWorkerId() >= rows[1].GetWorkerId() {
		t.Fatalf("overlap score rows: %v, want the 2 workers' ranks in order", rows)
	}
	ws, err := c.Workers(ctx)
	if err != nil || len(ws.Workers) != 2 || len(ws.Workers[0].Ranks) != 1 || ws.TrackedRequests != 2 {
		t.Fatalf("workers: %v %v", ws, err)
	}
	// The digest walks the index only when asked for (the shards count
	// their walks).
	if n := ws.IndexCounters["digests"]; n != 0 {
		t.Fatalf("a plain Workers walked the index %d times", n)
	}
	if _, err := c.IndexDigest(ctx); err != nil {
		t.Fatalf("index digest: %v", err)
	}
	if ws, err = c.Workers(ctx); err != nil || ws.IndexCounters["digests"] == 0 {
		t.Fatalf("workers after IndexDigest: %v %v, want the shards' digests counted", ws.GetIndexCounters(), err)
	}
	if err := c.PrefillDone(ctx, "r1"); err != nil {
		t.Fatalf("prefill done: %v", err)
	}
	if err := c.Free(ctx, "r1"); err != nil {
		t.Fatalf("free: %v", err)
	}
	if err := c.Free(ctx, "r1"); status.Code(err) != codes.NotFound {
		t.Fatalf("free again: %v, want NotFound", err)
	}
	if err := c.Free(ctx, gen.RequestId); err != nil {
		t.Fatalf("free the generated id: %v", err)
	}
	if got := testutil.ToFloat64(e.metrics.GRPCRequests.WithLabelValues("Free", "NotFound")); got != 1 {
		t.Errorf("kvrouter_grpc_requests_total{Free,NotFound} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.metrics.GRPCRequests.WithLabelValues("Route", "OK")); got != 3 {
		t.Errorf("kvrouter_grpc_requests_total{Route,OK} = %v, want 3", got)
	}
}

// A message over the limit (--max-body-bytes) is refused before it is
// decoded.
func TestMessageSizeLimit(t *testing.T) {
	e := newEnv(t, envOptions{workers: 1, maxRecvBytes: 64 << 10})
	_, err := e.client.Route(context.Background(), &pb.RouteRequest{TokenIds: prompt(40000, 1<<20), UpdateStates: new(false)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 160 kB prompt against a 64 kB limit: %v, want ResourceExhausted", err)
	}
	if _, err := e.client.Route(context.Background(), &pb.RouteRequest{TokenIds: prompt(100, 1), UpdateStates: new(false)}); err != nil {
		t.Fatalf("the connection after a refused message: %v", err)
	}
}
