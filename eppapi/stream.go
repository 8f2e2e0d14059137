package eppapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmode "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvrouter/kvrouter/httpapi"
	"github.com/kvrouter/kvrouter/messages"
)

var errInternal = status.Error(codes.Internal, "internal error")

// headerOnly spreads requests without a body over the workers.
var headerOnly atomic.Uint64

// stream is one HTTP request's ext_proc stream. Envoy sends, in order:
// the request headers, the body in pieces (the last with end_of_stream),
// maybe trailers, then the response's headers, body pieces and trailers.
// One goroutine (the stream's handler) reads and answers, so the state
// needs no lock.
type stream struct {
	s     *Server
	srv   extproc.ExternalProcessor_ProcessServer
	ctx   context.Context
	modes modes
	head  requestHead
	// pieces are the request body's pieces as they arrived (each its own
	// copy, made when the message was decoded: no copy is made here);
	// size is their length.
	pieces [][]byte
	size   int
	// decided: the request was answered (picked or refused).
	decided bool
	// addr is the picked endpoint; workers the address book the pick
	// was made from.
	addr    string
	rank    uint32
	inf     *httpapi.Inference
	workers map[uint64]string
	// meta is the request's metadata context as the gateway last sent
	// it (Envoy may attach it to any message).
	meta *corev3.Metadata
}

// Process serves one request's ext_proc stream.
func (s *Server) Process(srv extproc.ExternalProcessor_ProcessServer) error {
	st := &stream{s: s, srv: srv, ctx: srv.Context()}
	// The drop guard: a stream that ends before the answer did (the
	// client left, Envoy reset the stream, the connection broke) frees
	// the request.
	defer st.cut()
	first := true
	for {
		req, err := srv.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return status.Errorf(codes.Unknown, "receive from the gateway: %v", err)
		}
		if first {
			first = false
			st.modes = modesOf(req.GetProtocolConfig())
		}
		if md := req.GetMetadataContext(); md != nil && !st.decided {
			st.meta = md
		}
		out, done := st.handle(req)
		if req.GetObservabilityMode() {
			out = nil // Envoy ignores answers in observability mode
		}
		for _, r := range out {
			if err := srv.Send(r); err != nil {
				return status.Errorf(codes.Unknown, "send to the gateway: %v", err)
			}
		}
		if done {
			return nil
		}
	}
}

// cut frees a routed request whose answer did not end.
func (st *stream) cut() {
	if st.inf != nil && !st.inf.Ended() {
		st.inf.End("stream_cut")
		st.s.countEnd("cut")
	}
}

// handle answers one message; done: the stream has nothing more to say
// (an immediate response was sent).
func (st *stream) handle(req *extproc.ProcessingRequest) ([]*extproc.ProcessingResponse, bool) {
	switch v := req.GetRequest().(type) {
	case *extproc.ProcessingRequest_RequestHeaders:
		st.head = readHead(v.RequestHeaders.GetHeaders())
		if v.RequestHeaders.GetEndOfStream() {
			return st.pickWithoutBody(req)
		}
		if !requestModeSupported(st.modes.request) {
			return st.refuse(http.StatusInternalServerError, fmt.Sprintf(
				"the endpoint picker needs request_body_mode FULL_DUPLEX_STREAMED or BUFFERED, not %s", st.modes.request), "body_mode")
		}
		if st.modes.request == procmode.ProcessingMode_BUFFERED {
			// Envoy waits for this answer before it sends the body; the
			// pick then travels in the body's answer.
			return []*extproc.ProcessingResponse{{Response: &extproc.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extproc.HeadersResponse{}}}}, false
		}
		return nil, false
	case *extproc.ProcessingRequest_RequestBody:
		if st.decided {
			return nil, false
		}
		chunk := v.RequestBody.GetBody()
		if st.size+len(chunk) > st.s.opts.MaxBodyBytes {
			return st.refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", st.s.opts.MaxBodyBytes), "too_large")
		}
		if len(chunk) > 0 {
			st.pieces = append(st.pieces, chunk)
			st.size += len(chunk)
		}
		if !v.RequestBody.GetEndOfStream() {
			return nil, false
		}
		return st.pick(req, true)
	case *extproc.ProcessingRequest_RequestTrailers:
		// Trailers end a body whose last piece did not say so.
		out, done := []*extproc.ProcessingResponse(nil), false
		if !st.decided {
			out, done = st.pick(req, false)
		}
		if done {
			return out, true
		}
		return append(out, &extproc.ProcessingResponse{Response: &extproc.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extproc.TrailersResponse{}}}), false
	case *extproc.ProcessingRequest_ResponseHeaders:
		st.followServed(req)
		code, ct := responseHead(v.ResponseHeaders.GetHeaders())
		if st.inf != nil {
			st.inf.Started(code, ct)
			if code != http.StatusOK {
				st.s.countEnd("worker_error")
			} else if v.ResponseHeaders.GetEndOfStream() {
				st.end()
			}
		}
		return []*extproc.ProcessingResponse{{Response: &extproc.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extproc.HeadersResponse{}}}}, false
	case *extproc.ProcessingRequest_ResponseBody:
		chunk, eos := v.ResponseBody.GetBody(), v.ResponseBody.GetEndOfStream()
		if st.inf != nil {
			st.inf.Body(chunk)
			if eos {
				st.end()
			}
		}
		if st.modes.response == procmode.ProcessingMode_FULL_DUPLEX_STREAMED {
			return streamedBody(chunk, eos, responseBody), false
		}
		return []*extproc.ProcessingResponse{responseBody(&extproc.BodyResponse{})}, false
	case *extproc.ProcessingRequest_ResponseTrailers:
		st.end()
		return []*extproc.ProcessingResponse{{Response: &extproc.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extproc.TrailersResponse{}}}}, false
	}
	return nil, false
}

// end: the answer is complete.
func (st *stream) end() {
	if st.inf != nil && !st.inf.Ended() {
		st.inf.End("")
		st.s.countEnd("complete")
	}
}

// refuse answers the request with an immediate response.
func (st *stream) refuse(code int, msg string, reason string) ([]*extproc.ProcessingResponse, bool) {
	f := &httpapi.Failure{Status: code, Body: map[string]string{"error": msg}}
	return st.refuseWith(f, reason)
}

func (st *stream) refuseWith(f *httpapi.Failure, reason string) ([]*extproc.ProcessingResponse, bool) {
	st.decided = true
	st.s.count(strconv.Itoa(f.Status))
	if f.Status >= 500 || f.Status == http.StatusTooManyRequests {
		if ok, suppressed := st.s.warn.Allow(time.Now()); ok {
			st.s.log.Warn("endpoint picker refused a request", "status", f.Status, "reason", reason,
				"path", st.head.path, "err", string(f.JSON()), "suppressed", suppressed)
		}
	}
	return []*extproc.ProcessingResponse{immediate(f.Status, f.JSON(), "kvrouter_epp_"+reason)}, true
}

// allowed is the gateway's subset as worker ids (nil: no subset).
func (st *stream) allowed() ([]uint64, *httpapi.Failure) {
	addrs, ok, err := subset(st.meta)
	if err != nil {
		return nil, &httpapi.Failure{Status: http.StatusBadRequest, Body: map[string]string{"error": err.Error()}}
	}
	if !ok {
		return nil, nil
	}
	want := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		want[a] = true
	}
	var ids []uint64
	for _, id := range httpapi.SortedIDs(st.workers) {
		if want[st.workers[id]] {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, &httpapi.Failure{Status: http.StatusServiceUnavailable, Body: map[string]string{
			"error": fmt.Sprintf("no registered worker is in the gateway's endpoint subset (%d endpoints)", len(addrs))}}
	}
	return ids, nil
}

// book reads the workers' addresses.
func (st *stream) book() *httpapi.Failure {
	w, err := st.s.opts.API.WorkerAddrs(st.ctx)
	if err != nil {
		return &httpapi.Failure{Status: http.StatusServiceUnavailable, Body: map[string]string{"error": err.Error()}}
	}
	st.workers = w
	return nil
}

// pick reads the body, makes the decision and answers with it (eos: the
// body's last piece said so).
func (st *stream) pick(req *extproc.ProcessingRequest, eos bool) ([]*extproc.ProcessingResponse, bool) {
	if f := st.book(); f != nil {
		return st.refuseWith(f, "no_endpoint")
	}
	allowed, f := st.allowed()
	if f != nil {
		return st.refuseWith(f, "subset")
	}
	body := st.body()
	inf, f := st.s.opts.API.NewInference(st.ctx, st.head.path, st.head.header, body)
	if f != nil {
		return st.refuseWith(f, "input")
	}
	d, f := inf.Route(st.ctx, allowed, nil)
	if f != nil {
		return st.refuseWith(f, "route")
	}
	st.inf = inf
	addr, ok := st.workers[d.WorkerID]
	if !ok {
		// Registered after the address book was read: read it again.
		if f := st.book(); f == nil {
			addr, ok = st.workers[d.WorkerID]
		}
	}
	if !ok {
		st.inf.End("stream_cut")
		st.s.countEnd("cut")
		return st.refuse(http.StatusServiceUnavailable, fmt.Sprintf("worker %d has no address", d.WorkerID), "no_endpoint")
	}
	p := pick{dest: destination(addr, st.fallbacks(d.WorkerID, allowed)), rank: d.DpRank, bodyLen: len(body)}
	if d.HasPrefill {
		p.prefiller = st.workers[d.PrefillWorkerID]
	}
	st.decided, st.addr, st.rank = true, addr, d.DpRank
	st.s.count("routed")
	if st.modes.request == procmode.ProcessingMode_BUFFERED {
		return []*extproc.ProcessingResponse{bodyPick(p)}, false
	}
	// Full duplex: the held headers go on with the pick, then the body
	// as it came. Envoy forwards nothing of the body the picker has not
	// sent back, and takes no body piece before the headers' answer,
	// which needs the whole prompt: the pieces are held until the pick
	// and sent back then, as the Inference Extension's reference picker
	// does (BUFFERED mode needs no echo).
	return append([]*extproc.ProcessingResponse{headersPick(p)}, streamedBody(body, eos, requestBody)...), false
}

// body is the request body: its one piece as it arrived (the usual
// case: Envoy sends a small body in one message), or the pieces joined.
func (st *stream) body() []byte {
	switch len(st.pieces) {
	case 0:
		return nil
	case 1:
		return st.pieces[0]
	}
	b := make([]byte, 0, st.size)
	for _, p := range st.pieces {
		b = append(b, p...)
	}
	st.pieces = [][]byte{b}
	return b
}

// fallbacks are the endpoints after the chosen one: other workers the
// request may go to, in id order, Fallbacks at most.
func (st *stream) fallbacks(chosen uint64, allowed []uint64) []string {
	n := st.s.opts.Fallbacks
	if n <= 0 {
		return nil
	}
	ids := allowed
	if ids == nil {
		ids = httpapi.SortedIDs(st.workers)
	}
	var out []string
	seen := map[string]bool{st.workers[chosen]: true}
	for _, id := range ids {
		a := st.workers[id]
		if id == chosen || a == "" || seen[a] {
			continue
		}
		seen[a] = true
		out = append(out, a)
		if len(out) == n {
			break
		}
	}
	return out
}

// pickWithoutBody names an endpoint for a request without a body (a GET
// such as /v1/models): no prompt, so no decision and nothing recorded;
// the workers take turns.
func (st *stream) pickWithoutBody(req *extproc.ProcessingRequest) ([]*extproc.ProcessingResponse, bool) {
	if f := st.book(); f != nil {
		return st.refuseWith(f, "no_endpoint")
	}
	ids, f := st.allowed()
	if f != nil {
		return st.refuseWith(f, "subset")
	}
	if ids == nil {
		ids = httpapi.SortedIDs(st.workers)
	}
	if len(ids) == 0 {
		return st.refuse(http.StatusServiceUnavailable, "no worker is registered", "no_endpoint")
	}
	addr := st.workers[ids[headerOnly.Add(1)%uint64(len(ids))]]
	st.decided = true
	st.s.count("header_only")
	return []*extproc.ProcessingResponse{headersPick(pick{dest: addr})}, false
}

// followServed: when the gateway reports it served the request from
// another endpoint than the chosen one (a fallback, after the first
// failed), the request is recorded on that worker instead.
func (st *stream) followServed(req *extproc.ProcessingRequest) {
	got := served(req.GetMetadataContext())
	if st.inf == nil || got == "" || got == st.addr {
		return
	}
	for id, a := range st.workers {
		if a != got {
			continue
		}
		if _, f := st.inf.Reroute(st.ctx, &messages.WorkerRank{WorkerId: id, DpRank: st.rank}); f != nil {
			st.s.log.Debug("could not record a request on the fallback endpoint that served it", "endpoint", got, "err", f.Error())
			return
		}
		st.addr = got
		st.s.countEnd("rerouted")
		return
	}
}
