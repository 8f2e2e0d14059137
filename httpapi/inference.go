package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/routeapi"
)

// The OpenAI endpoints the proxy serves, and the endpoint picker routes.
const (
	PathCompletions = "/v1/completions"
	PathChat        = "/v1/chat/completions"
)

// Failure is a refused OpenAI request: the status and JSON body the
// client gets, and the proxy outcome it counts as ("" = not counted).
type Failure struct {
	Status  int
	Body    any
	Outcome string
	// RetryAfter is the Retry-After header's value ("" = none).
	RetryAfter string
	msg        string
}

func (f *Failure) Error() string { return f.msg }

// write sends the failure as an HTTP answer.
func (f *Failure) write(w http.ResponseWriter) {
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	writeJSON(w, f.Status, f.Body)
}

// JSON is the body as the client gets it.
func (f *Failure) JSON() []byte {
	b, err := json.Marshal(f.Body)
	if err != nil {
		return []byte(`{"error":"internal error"}`)
	}
	return b
}

func failure(status int, format string, args ...any) *Failure {
	msg := fmt.Sprintf(format, args...)
	return &Failure{Status: status, Body: errorBody{Error: msg}, msg: msg}
}

// prepare reads an OpenAI body of path (PathCompletions or PathChat)
// into the request the proxy and the endpoint picker route: its prompt
// tokenized as the served model's engine does, its LoRA adapter, max
// tokens, sticky session (header or body) and parity fields.
func (s *Server) prepare(ctx context.Context, path string, header http.Header, body []byte) (*proxied, *Failure) {
	b, err := readOpenAIBody(body)
	if err != nil {
		return nil, failure(http.StatusBadRequest, "malformed JSON: %s", describeJSONError(err))
	}
	if b.fields == nil {
		return nil, failure(http.StatusBadRequest, "malformed JSON: the body must be an object")
	}
	if _, ok := b.fields["kv_transfer_params"]; ok {
		// A client's transfer parameters would point an engine's KV
		// connector at any host it names; only the router sets them.
		f := failure(http.StatusBadRequest, "kv_transfer_params is set by the router in a disaggregated fleet, not by clients")
		f.Outcome = "bad_input"
		return nil, f
	}
	var p *proxied
	var f *Failure
	switch path {
	case PathCompletions:
		p, f = s.prepareCompletion(ctx, header, b)
	case PathChat:
		p, f = s.prepareChat(ctx, header, b)
	default:
		return nil, failure(http.StatusNotFound, "%s is not routed: the router routes %s and %s", path, PathCompletions, PathChat)
	}
	if f != nil {
		return nil, f
	}
	// The served model selects the policy file's pipeline (a body
	// without a string model routes with the default one).
	if raw, ok := b.fields["model"]; ok {
		_ = json.Unmarshal(raw, &p.modelName) // not a string: no model, as tokenization judged it
	}
	p.explain = explainAsked(header)
	return p, nil
}

// answer is the lifecycle guard of one routed request's answer, shared
// by the proxy's relay and the endpoint picker: the first line marks
// prefill done, usage is read for parity, output blocks grow the request
// as tokens stream, and end frees the request exactly once, whatever
// ended the answer (completion, worker error, client gone, broken
// stream). It is not safe for concurrent use.
type answer struct {
	p *proxied
	u usageReader
	// first: no line of the answer has arrived yet.
	first  bool
	tokens uint64
	ended  bool
	// renew renews the request's lease while lines arrive.
	renew *leaseRenewer
}

// answer starts tracking the answer (sse: a server-sent-event stream).
func (p *proxied) answer(sse bool) *answer {
	return &answer{p: p, u: usageReader{sse: sse, keep: p.s.parity != nil}, first: true, renew: p.s.leaseRenewer(p.requestID)}
}

// line takes one line of the answer (a unary answer may come in pieces
// of any size); drop says the client must not see it (the usage chunk
// the proxy asked for on its behalf).
func (a *answer) line(line []byte) (drop bool) {
	p := a.p
	a.renew.line()
	if a.first {
		a.first = false
		p.s.markPrefill(p.requestID)
	}
	usageOnly, drop := a.u.line(p, line)
	if !usageOnly && bytes.HasPrefix(line, []byte("data: {")) {
		a.tokens++
		p.maybeOutputBlock(a.tokens)
	}
	return drop
}

// end records the answer's parity (reason "": it completed, so its usage
// is read; else why it cannot be compared) and frees the request, and
// returns once the free's gossip left for every peer (freeGossiped). Only
// the first call does anything.
func (a *answer) end(reason string) {
	if a.ended {
		return
	}
	a.ended = true
	if reason == "" {
		reason = a.u.finish(a.p)
	}
	a.p.observeParity(reason)
	a.p.s.freeGossiped(a.p.requestID)
}

// Inference is one OpenAI request that a front end other than the proxy
// forwards to the worker itself (the gateway's endpoint picker, eppapi):
// read and tokenized as the proxy reads it (prepare), routed by the same
// recorded decision, and tracked through its answer by the proxy's
// lifecycle guard. Its methods are not safe for concurrent use; one
// goroutine (the ext_proc stream's) drives it.
type Inference struct {
	p *proxied
	a *answer
	// carry holds a streamed answer's line cut by a chunk boundary.
	carry    []byte
	prefill  string // the prefill hop's id while it is tracked
	hadReply bool
}

// maxCarry bounds the partial line an Inference keeps between chunks of
// a streamed answer; a longer line is read in pieces (its usage, if any,
// then counts as malformed).
const maxCarry = 1 << 20

// NewInference reads an OpenAI body sent to path. A refusal is the
// answer the client must get.
func (s *Server) NewInference(ctx context.Context, path string, header http.Header, body []byte) (*Inference, *Failure) {
	p, f := s.prepare(ctx, path, header, body)
	if f != nil {
		return nil, f
	}
	return &Inference{p: p}, nil
}

// Decision is an Inference's recorded route.
type Decision struct {
	RequestID string
	WorkerID  uint64
	DpRank    uint32
	// PrefillWorkerID/PrefillDpRank name the prefill rank of a
	// disaggregated decision (HasPrefill).
	HasPrefill      bool
	PrefillWorkerID uint64
	PrefillDpRank   uint32
}

// Route makes the recorded decision (allowed: the workers it may choose,
// nil = any; pinned: the one rank it must choose). Its failure is the
// answer the client gets (routeapi's statuses: 503 no eligible worker,
// 429 queue full, ...). A routed Inference must be ended (End).
func (in *Inference) Route(ctx context.Context, allowed []uint64, pinned *messages.WorkerRank) (Decision, *Failure) {
	reply, err := in.p.route(ctx, allowed, pinned)
	if err != nil {
		return Decision{}, in.p.s.routerFailure(err)
	}
	in.hadReply = true
	d := Decision{RequestID: in.p.requestID, WorkerID: in.p.worker, DpRank: in.p.rank}
	if pw := reply.PrefillWorker; pw != nil {
		d.HasPrefill, d.PrefillWorkerID, d.PrefillDpRank = true, pw.WorkerId, pw.DpRank
		in.prefill = reply.PrefillRequestId
	}
	return d, nil
}

// Reroute records the request on another rank than the one Route chose
// (the gateway served it from a fallback endpoint): the first decision
// is freed and a decision pinned to the rank is recorded.
func (in *Inference) Reroute(ctx context.Context, to *messages.WorkerRank) (Decision, *Failure) {
	s := in.p.s
	if in.prefill != "" {
		s.freeQuietly(in.prefill)
		in.prefill = ""
	}
	s.freeQuietly(in.p.requestID)
	in.hadReply = false
	return in.Route(ctx, nil, to)
}

// Ended reports whether the request was ended (End).
func (in *Inference) Ended() bool { return in.a != nil && in.a.ended }

// Started is the answer's status and content type arriving: a status
// other than 200 ends the request (the engine is not working on it).
func (in *Inference) Started(status int, contentType string) {
	in.a = in.p.answer(len(contentType) >= 17 && contentType[:17] == "text/event-stream")
	if status != http.StatusOK {
		in.End("worker_error")
	}
}

// Body takes a piece of the answer's body, of any size.
func (in *Inference) Body(chunk []byte) {
	if in.a == nil {
		in.Started(http.StatusOK, "")
	}
	if in.a.ended || len(chunk) == 0 {
		return
	}
	if in.prefill != "" {
		// The decode worker answers only after the prefill hop's KV
		// arrived: the hop is done.
		in.p.s.freeQuietly(in.prefill)
		in.prefill = ""
	}
	if !in.a.u.sse {
		in.a.line(chunk)
		return
	}
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			in.carry = append(in.carry, chunk...)
			if len(in.carry) > maxCarry {
				in.a.line(in.carry)
				in.carry = in.carry[:0]
			}
			return
		}
		if len(in.carry) > 0 {
			in.carry = append(in.carry, chunk[:i+1]...)
			in.a.line(in.carry)
			in.carry = in.carry[:0]
		} else {
			in.a.line(chunk[:i+1])
		}
		chunk = chunk[i+1:]
	}
}

// End ends the request: reason "" is a complete answer (its usage is
// read), anything else why it ended early ("stream_cut",
// "worker_error"). It frees the request once; later calls do nothing.
// An Inference never routed frees nothing.
func (in *Inference) End(reason string) {
	if !in.hadReply {
		return
	}
	if in.a == nil {
		in.a = in.p.answer(false)
	}
	if in.a.ended {
		return
	}
	if reason == "" {
		if len(in.carry) > 0 {
			in.a.line(in.carry)
			in.carry = in.carry[:0]
		}
	}
	if in.prefill != "" {
		in.p.s.freeQuietly(in.prefill)
		in.prefill = ""
	}
	in.a.end(reason)
}

// Tokens is the prompt's token count as the router counted it.
func (in *Inference) Tokens() int { return len(in.p.tokens) }

// Stream reports whether the client asked for a streamed answer.
func (in *Inference) Stream() bool {
	var stream bool
	raw, ok := in.p.fields["stream"]
	return ok && json.Unmarshal(raw, &stream) == nil && stream
}

// routerFailure is the answer to a failed router call (routeapi's
// statuses: 503 no eligible worker, 429 queue full with its figures, ...).
func (s *Server) routerFailure(err error) *Failure {
	f := routeapi.Classify(err)
	if f.Unexpected {
		s.log.Error("router call failed", "err", err)
	}
	body := errorBody{Error: f.Message, Reason: f.Reason}
	if f.Queue != nil {
		body.QueueDepth, body.QueueLimit = &f.Queue.Depth, &f.Queue.Limit
	}
	return &Failure{Status: f.HTTPStatus, Body: body, msg: f.Message}
}

// WorkerAddrs maps every registered worker to the host:port of its URL
// (the engine's listener, as a gateway names its endpoints), from the
// proxy's registry copy (refreshed at most once a second). The map is
// shared: callers must not change it.
func (s *Server) WorkerAddrs(ctx context.Context) (map[uint64]string, error) {
	s.urlsMu.Lock()
	addrs, fresh := s.addrs, s.addrs != nil && time.Since(s.urlsRefresh) < time.Second
	s.urlsMu.Unlock()
	if fresh {
		return addrs, nil
	}
	if err := s.refreshURLs(ctx); err != nil {
		return nil, err
	}
	s.urlsMu.Lock()
	defer s.urlsMu.Unlock()
	return s.addrs, nil
}

// HostPort is a worker URL's host:port (the scheme's port when the URL
// names none).
func HostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("worker url %q: %w", raw, err)
	}
	if u.Host == "" {
		return "", fmt.Errorf("worker url %q has no host", raw)
	}
	if u.Port() != "" {
		return u.Host, nil
	}
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	return net.JoinHostPort(u.Hostname(), strconv.Itoa(port)), nil
}

// SortedIDs lists a worker map's ids in order.
func SortedIDs(m map[uint64]string) []uint64 {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
