package kvclient

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// Stream is one Lifecycle stream shared by concurrent callers: each call
// gets an id, is sent on the stream, and waits for the answer carrying
// that id. Its calls return the same errors as the Client's unary ones.
// A broken stream fails every call waiting on it and every later one;
// open a new Stream then.
type Stream struct {
	stream pb.Router_LifecycleClient
	cancel context.CancelFunc
	next   atomic.Uint64

	sendMu sync.Mutex

	mu      sync.Mutex
	pending map[uint64]chan *pb.LifecycleResponse
	err     error // set once the stream ended
	done    chan struct{}
}

// OpenStream opens a Lifecycle stream; it lives until Close, ctx's end
// or the connection's.
func (c *Client) OpenStream(ctx context.Context) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	st, err := c.rc.Lifecycle(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &Stream{stream: st, cancel: cancel, pending: map[uint64]chan *pb.LifecycleResponse{}, done: make(chan struct{})}
	go s.receive()
	return s, nil
}

// receive hands each answer to its caller until the stream ends.
func (s *Stream) receive() {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.mu.Lock()
			s.err = err
			for id, ch := range s.pending {
				delete(s.pending, id)
				close(ch)
			}
			s.mu.Unlock()
			close(s.done)
			return
		}
		s.mu.Lock()
		ch := s.pending[resp.GetId()]
		delete(s.pending, resp.GetId())
		s.mu.Unlock()
		if ch != nil {
			ch <- resp // buffered: never blocks
		}
	}
}

// call sends one call and waits for its answer.
func (s *Stream) call(ctx context.Context, req *pb.LifecycleRequest) (*pb.LifecycleResponse, error) {
	id := s.next.Add(1)
	req.Id = id
	ch := make(chan *pb.LifecycleResponse, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, s.streamErr(err)
	}
	s.pending[id] = ch
	s.mu.Unlock()
	s.sendMu.Lock()
	err := s.stream.Send(req)
	s.sendMu.Unlock()
	if err != nil {
		s.forget(id)
		// Send reports io.EOF on a broken stream; Recv has the reason.
		<-s.done
		return nil, s.streamErr(s.err)
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, s.streamErr(s.err)
		}
		if e := resp.GetError(); e != nil {
			return nil, errorOf(e)
		}
		return resp, nil
	case <-ctx.Done():
		// The router still runs the call; its answer is dropped.
		s.forget(id)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (s *Stream) forget(id uint64) {
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
}

func (s *Stream) streamErr(err error) error {
	if _, ok := status.FromError(err); ok && err != nil {
		return err
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("kvclient: lifecycle stream ended: %v", err))
}

// errorOf is a stream call's error as the unary call's status error.
func errorOf(e *pb.Error) error {
	st := status.New(codes.Code(e.GetCode()), e.GetMessage())
	if q := e.GetQueueFull(); q != nil {
		if d, err := st.WithDetails(q); err == nil {
			st = d
		}
	}
	return st.Err()
}

// Route routes a request over the stream.
func (s *Stream) Route(ctx context.Context, req *pb.RouteRequest) (*pb.RouteResponse, error) {
	resp, err := s.call(ctx, &pb.LifecycleRequest{Call: &pb.LifecycleRequest_Route{Route: req}})
	if err != nil {
		return nil, err
	}
	return resp.GetRoute(), nil
}

// PrefillDone marks request id's prefill done over the stream.
func (s *Stream) PrefillDone(ctx context.Context, id string) error {
	_, err := s.call(ctx, &pb.LifecycleRequest{Call: &pb.LifecycleRequest_PrefillDone{PrefillDone: &pb.RequestRef{RequestId: id}}})
	return err
}

// Free frees request id over the stream.
func (s *Stream) Free(ctx context.Context, id string) error {
	_, err := s.call(ctx, &pb.LifecycleRequest{Call: &pb.LifecycleRequest_Free{Free: &pb.RequestRef{RequestId: id}}})
	return err
}

// Close ends the stream: calls in flight are answered first, unless ctx
// ends before (then they fail).
func (s *Stream) Close(ctx context.Context) error {
	s.sendMu.Lock()
	err := s.stream.CloseSend()
	s.sendMu.Unlock()
	select {
	case <-s.done:
	case <-ctx.Done():
	}
	s.cancel()
	<-s.done
	return err
}
