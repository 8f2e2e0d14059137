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
// calls for the same request run one after another in the order received,
// so a frontend can send both for a request without waiting in between.
// Calls for different requests run in up to streamLanes lanes (a request's
// lane is a hash of its id): with a single lane, a stream freed one
// request per scheduler round trip, and a slow free held up every other
// request's behind it. At most
// StreamInFlight calls are in flight: past that the stream stops reading
// (HTTP/2 flow control then holds the client back). When the client
// closes its side, the calls in flight finish and are answered; when it
// leaves, they are cancelled (a recorded decision nobody will free is
// freed by the router, as for an HTTP client that leaves). A done
// prefill_done or free is answered once its gossip left for every peer,
// as the unary calls are: the lanes hand such answers to one goroutine
// that waits (Router.Gossiped) once for all the answers queued meanwhile,
// so a lane goes on with its next call while the gossip is on its way.
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
	var wg sync.WaitGroup
	// acks holds answers waiting for their gossip; every one holds a
	// slot, so it never fills.
	acks := make(chan *pb.LifecycleResponse, s.opts.StreamInFlight)
	var ackOnce sync.Once
	ackDone := make(chan struct{})
	answer := func(resp *pb.LifecycleResponse) {
		if resp.GetAck() == nil {
			send(resp)
			<-slots
			return
		}
		ackOnce.Do(func() { go s.ackGossiped(ctx, acks, send, slots, ackDone) })
		acks <- resp
	}
	// Lanes start on first use (a stream that only routes has none), and
	// hold StreamInFlight calls between them: a full lane stops the reader
	// as the slots do, while its goroutine drains it.
	lanes := make([]chan *pb.LifecycleRequest, streamLanes)
	laneCap := max(s.opts.StreamInFlight/streamLanes, 1)
	lane := func(i int) chan<- *pb.LifecycleRequest {
		if lanes[i] == nil {
			lanes[i] = make(chan *pb.LifecycleRequest, laneCap)
			wg.Add(1)
			go func(calls <-chan *pb.LifecycleRequest) {
				defer wg.Done()
				for req := range calls {
					answer(s.streamCall(ctx, req))
				}
			}(lanes[i])
		}
		return lanes[i]
	}
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
		select {
		case lane(laneOf(req, len(lanes))) <- req:
		case <-ctx.Done():
			<-slots // the call was not queued: give its slot back
		}
	}
	for _, l := range lanes {
		if l != nil {
			close(l)
		}
	}
	wg.Wait()
	close(acks)
	ackOnce.Do(func() { close(ackDone) }) // no answer ever waited
	<-ackDone
	if recvErr != nil {
		return recvErr
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// ackGossiped sends the stream's acknowledgements once their gossip left
// (Router.Gossiped): one wait for every answer queued meanwhile. It
// closes done once acks is closed and drained.
func (s *Server) ackGossiped(ctx context.Context, acks <-chan *pb.LifecycleResponse, send func(*pb.LifecycleResponse),
	slots <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	var batch []*pb.LifecycleResponse
	for resp := range acks {
		batch = append(batch[:0], resp)
	more:
		for {
			select {
			case r, ok := <-acks:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		_ = s.opts.Router.Gossiped(ctx)
		for i, r := range batch {
			send(r)
			<-slots
			batch[i] = nil
		}
	}
}

// streamLanes is how many prefill_done/free calls of one stream run at once.
const streamLanes = 8

// laneOf is the lane of a prefill_done or free call: the same request id
// always maps to the same lane, which keeps that request's calls in order.
func laneOf(req *pb.LifecycleRequest, lanes int) int {
	var id string
	switch call := req.GetCall().(type) {
	case *pb.LifecycleRequest_PrefillDone:
		id = call.PrefillDone.GetRequestId()
	case *pb.LifecycleRequest_Free:
		id = call.Free.GetRequestId()
	}
	h := uint32(2166136261) // FNV-1a, without hash/fnv's allocation per call
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return int(h % uint32(lanes))
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
