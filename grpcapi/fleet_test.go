package grpcapi_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvrouter/kvrouter/messages"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// In a disaggregated fleet Route names the prefill rank and the hop's id
// beside the decode rank, as /route does; freeing the request frees both.
func TestRouteDisaggregated(t *testing.T) {
	e := newEnv(t, envOptions{workers: 2, roles: map[int]messages.WorkerRole{
		1: messages.WorkerRole_WORKER_ROLE_PREFILL, 2: messages.WorkerRole_WORKER_ROLE_DECODE}})
	ctx := context.Background()
	prompt := make([]uint32, 2048) // over max_local_prefill_length: prefilled remotely
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	res, err := e.client.Route(ctx, &pb.RouteRequest{RequestId: "d1", TokenIds: prompt})
	if err != nil {
		t.Fatal(err)
	}
	if res.WorkerId != 2 || res.GetPrefillWorker().GetWorkerId() != 1 || res.PrefillRequestId != "d1#prefill" || res.RequestId != "d1" {
		t.Fatalf("route = %+v, want decode on 2, prefill on 1 as d1#prefill", res)
	}
	if err := e.client.Free(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	// Both hops are gone: freeing the prefill hop again is an unknown request.
	if err := e.client.Free(ctx, "d1#prefill"); status.Code(err) != codes.NotFound {
		t.Fatalf("free of the freed hop: %v, want NotFound", err)
	}
	// A short prompt is prefilled on the decode worker: no prefill rank.
	res, err = e.client.Route(ctx, &pb.RouteRequest{TokenIds: prompt[:64], UpdateStates: new(false)})
	if err != nil || res.WorkerId != 2 || res.PrefillWorker != nil || res.PrefillRequestId != "" {
		t.Fatalf("short prompt: %+v, %v", res, err)
	}
}

// session_id binds a session as over HTTP: a later request of the session
// goes to the first one's rank whatever its prompt; a malformed id is
// InvalidArgument.
func TestRouteSession(t *testing.T) {
	e := newEnv(t, envOptions{workers: 4})
	ctx := context.Background()
	first, err := e.client.Route(ctx, &pb.RouteRequest{RequestId: "s1", TokenIds: []uint32{1, 2, 3}, SessionId: "conv"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		prompt := []uint32{uint32(100 + i), 7, 8, 9}
		res, err := e.client.Route(ctx, &pb.RouteRequest{TokenIds: prompt, SessionId: "conv", UpdateStates: new(false)})
		if err != nil {
			t.Fatal(err)
		}
		if res.WorkerId != first.WorkerId || res.DpRank != first.DpRank {
			t.Fatalf("request %d of the session went to %d/%d, want %d/%d", i, res.WorkerId, res.DpRank, first.WorkerId, first.DpRank)
		}
	}
	if _, err := e.client.Route(ctx, &pb.RouteRequest{TokenIds: []uint32{1}, SessionId: "bad\x01id"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("control character in session_id: %v, want InvalidArgument", err)
	}
}
