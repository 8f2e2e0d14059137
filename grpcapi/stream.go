package grpcapi

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// Lifecycle serves many calls over one stream. Routes run concurrently
// (a decision may wait in the backpressure queue); prefill_done and free
// calls run one after another in the order received, so a frontend can
// send both for a request without waiting in between. At most
// StreamInFlight calls are in flight: past that the stream stops reading
// (HTTP/2 flow control then holds the client back). When the client
// closes its side, the calls in flight finish and are answered; when it
// leaves, they are cancelled (a recorded decision nobody will free is
// freed by the router, as for an HTTP client that leaves).
func (v *service) Lifecycle(stream grpc.BidiStreamingServer[pb.LifecycleRequest, pb.LifecycleResponse]) error {
	s := v.s
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	var sendMu sync.Mutex
	send := func(resp *pb.LifecycleResponse) {
		sendMu.Lock()
		err := stream.Send(resp)
		sendMu.Unlock()
		if err != nil {
			cancel(err)
		}
	}
	slots := make(chan struct{}, s.opts.StreamInFlight)
	ordered := make(chan *pb.LifecycleRequest, s.opts.StreamInFlight)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for req := range ordered {
			send(s.streamCall(ctx, req))
			<-slots
		}
	}()
	var recvErr error
	for {
		req, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				recvErr = err
				cancel(err)
			}
			break
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if req.GetRoute() != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				send(s.streamCall(ctx, req))
				<-slots
			}()
			continue
		}
		ordered <- req // never blocks: a slot is held for it
	}
	close(ordered)
	wg.Wait()
	if recvErr != nil {
		return recvErr
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// streamCall runs one call of a Lifecycle stream and answers it,
// counting it as Lifecycle/<call> in kvrouter_grpc_requests_total.
func (s *Server) streamCall(ctx context.Context, req *pb.LifecycleRequest) (resp *pb.LifecycleResponse) {
	resp = &pb.LifecycleResponse{Id: req.GetId()}
	method := "Lifecycle/none"
	var err error
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("lifecycle call panic", "panic", p)
			err = status.Error(codes.Internal, "internal error")
		}
		if err != nil {
			st := status.Convert(err)
			e := &pb.Error{Code: int32(st.Code()), Message: st.Message()}
			for _, d := range st.Details() {
				if q, ok := d.(*pb.QueueFull); ok {
					e.QueueFull = q
				}
			}
			resp.Result = &pb.LifecycleResponse_Error{Error: e}
		}
		s.count(method, status.Code(err))
	}()
	switch call := req.GetCall().(type) {
	case *pb.LifecycleRequest_Route:
		method = "Lifecycle/Route"
		var r *pb.RouteResponse
		if r, err = s.route(ctx, call.Route); err == nil {
			resp.Result = &pb.LifecycleResponse_Route{Route: r}
		}
	case *pb.LifecycleRequest_PrefillDone:
		method = "Lifecycle/PrefillDone"
		var a *pb.Ack
		if a, err = s.lifecycle(ctx, call.PrefillDone, true); err == nil {
			resp.Result = &pb.LifecycleResponse_Ack{Ack: a}
		}
	case *pb.LifecycleRequest_Free:
		method = "Lifecycle/Free"
		var a *pb.Ack
		if a, err = s.lifecycle(ctx, call.Free, false); err == nil {
			resp.Result = &pb.LifecycleResponse_Ack{Ack: a}
		}
	default:
		err = invalid(errNoCall)
	}
	return resp
}
