package grpcapi_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// Many callers share one Lifecycle stream: every call gets its own
// answer, and once all requests are freed the router tracks none.
func TestLifecycleStreamConcurrentCallers(t *testing.T) {
	e := newEnv(t, envOptions{workers: 4})
	ctx := context.Background()
	s, err := e.client.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const callers, each = 32, 25
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("c%d-%d", c, i)
				res, err := s.Route(ctx, &pb.RouteRequest{RequestId: id, TokenIds: prompt(64, uint32(c*1000+i))})
				if err != nil || res.RequestId != id || res.WorkerId < 1 || res.WorkerId > 4 {
					errs <- fmt.Errorf("route %s: %v %v", id, res, err)
					return
				}
				if err := s.PrefillDone(ctx, id); err != nil {
					errs <- fmt.Errorf("prefill done %s: %w", id, err)
					return
				}
				if err := s.Free(ctx, id); err != nil {
					errs <- fmt.Errorf("free %s: %w", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// An error travels back as the unary call's status.
	if err := s.Free(ctx, "c0-0"); status.Code(err) != codes.NotFound {
		t.Errorf("free of a freed request over the stream: %v, want NotFound", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Route(ctx, &pb.RouteRequest{TokenIds: []uint32{1}}); status.Code(err) != codes.Unavailable {
		t.Errorf("route on a closed stream: %v, want Unavailable", err)
	}
	ws, err := e.client.Workers(ctx)
	if err != nil || ws.TrackedRequests != 0 {
		t.Fatalf("after freeing every request: tracked %d (%v)", ws.GetTrackedRequests(), err)
	}
}

// Prefill-done and free sent back to back, without waiting for answers,
// are applied in order; a request without a call is refused alone; the
// answers carry the client's ids.
func TestLifecycleStreamOrderAndBadCalls(t *testing.T) {
	e := newEnv(t, envOptions{workers: 1})
	ctx := context.Background()
	st, err := e.client.RouterClient().Lifecycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.LifecycleRequest{Id: 1, Call: &pb.LifecycleRequest_Route{Route: &pb.RouteRequest{RequestId: "a", TokenIds: []uint32{1, 2}}}}); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Recv(); err != nil || res.Id != 1 || res.GetRoute().GetRequestId() != "a" {
		t.Fatalf("route: %v %v", res, err)
	}
	for _, req := range []*pb.LifecycleRequest{
		{Id: 2, Call: &pb.LifecycleRequest_PrefillDone{PrefillDone: &pb.RequestRef{RequestId: "a"}}},
		{Id: 3, Call: &pb.LifecycleRequest_Free{Free: &pb.RequestRef{RequestId: "a"}}},
		{Id: 4},
		{Id: 5, Call: &pb.LifecycleRequest_Route{Route: &pb.RouteRequest{}}},
		{Id: 6, Call: &pb.LifecycleRequest_Free{}},
	} {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]*pb.LifecycleResponse{}
	for {
		res, err := st.Recv()
		if err != nil {
			break
		}
		got[res.Id] = res
	}
	if len(got) != 5 {
		t.Fatalf("answers %v, want 5", got)
	}
	if got[2].GetAck().GetRequestId() != "a" || got[3].GetAck().GetRequestId() != "a" {
		t.Errorf("prefill done then free: %v / %v", got[2], got[3])
	}
	for _, id := range []uint64{4, 5, 6} {
		if e := got[id].GetError(); e == nil || codes.Code(e.Code) != codes.InvalidArgument || e.Message == "" {
			t.Errorf("call %d: %v, want an InvalidArgument error", id, got[id])
		}
	}
}

// Calls for different requests run in several lanes, but one request's
// prefill_done and free stay in the order sent: 64 requests routed, then
// each one's prefill_done and free pipelined without waiting. A free run
// before its prefill_done would make the prefill_done answer NotFound.
func TestLifecycleStreamKeepsEachRequestsOrderAcrossLanes(t *testing.T) {
	e := newEnv(t, envOptions{workers: 2})
	ctx := context.Background()
	st, err := e.client.RouterClient().Lifecycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	for i := range n {
		id := fmt.Sprintf("r-%d", i)
		if err := st.Send(&pb.LifecycleRequest{Id: uint64(i + 1), Call: &pb.LifecycleRequest_Route{Route: &pb.RouteRequest{RequestId: id, TokenIds: []uint32{1, 2, uint32(i)}}}}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if res, err := st.Recv(); err != nil || res.GetRoute() == nil {
			t.Fatalf("route: %v %v", res, err)
		}
	}
	for i := range n {
		id := fmt.Sprintf("r-%d", i)
		for k, req := range []*pb.LifecycleRequest{
			{Id: uint64(1000 + 2*i), Call: &pb.LifecycleRequest_PrefillDone{PrefillDone: &pb.RequestRef{RequestId: id}}},
			{Id: uint64(1001 + 2*i), Call: &pb.LifecycleRequest_Free{Free: &pb.RequestRef{RequestId: id}}},
		} {
			if err := st.Send(req); err != nil {
				t.Fatalf("request %s call %d: %v", id, k, err)
			}
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	answered := 0
	for {
		res, err := st.Recv()
		if err != nil {
			break
		}
		answered++
		if res.GetAck() == nil {
			t.Errorf("call %d: %v, want an ack (a free overtook its prefill_done?)", res.Id, res)
		}
	}
	if answered != 2*n {
		t.Fatalf("%d answers, want %d", answered, 2*n)
	}
}
