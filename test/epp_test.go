package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmode "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/replica"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// The endpoint picker's hermetic harness: a real replica with mock
// engines, its ext_proc port reached over a real gRPC connection, and
// envoy (below) playing the gateway as Envoy's ext_proc filter does in
// FULL_DUPLEX_STREAMED mode (or BUFFERED): the request's headers (with
// the protocol configuration and the subset hint), its body in pieces
// with end_of_stream on the last, then, once the picker named an
// endpoint, the request really sent there and the engine's answer fed
// back as response headers, body pieces and the end of stream.

// envoy is one gateway talking to one picker.
type envoy struct {
	t    testing.TB
	conn *grpc.ClientConn
	// chunk is the size the gateway cuts bodies into.
	chunk int
	mode  procmode.ProcessingMode_BodySendMode
	// token, when set, is sent as the stream's authorization metadata.
	token string
}

func newEnvoy(t testing.TB, rep *replica.Replica) *envoy {
	t.Helper()
	return newEnvoyAt(t, rep.EPPAddr())
}

// newEnvoyAt is a gateway talking to the picker at addr.
func newEnvoyAt(t testing.TB, addr string) *envoy {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &envoy{t: t, conn: conn, chunk: 1000, mode: procmode.ProcessingMode_FULL_DUPLEX_STREAMED}
}

// exchange is one request through the gateway.
type exchange struct {
	path    string
	body    []byte
	headers map[string]string
	// subset is the gateway's allow-list (nil: none sent).
	subset []string
	// cancelAfter > 0 resets the stream after that many answer pieces
	// (the client left mid-stream).
	cancelAfter int
	// serveFrom, when set, is where the gateway sends the request
	// instead of the first endpoint named (a fallback).
	serveFrom string
	// gate, when set, holds the request between the pick and the
	// engine (the request stays in prefill meanwhile).
	gate <-chan struct{}
}

// outcome is what the gateway saw.
type outcome struct {
	// status is the immediate response's HTTP status (0: an endpoint
	// was named).
	status    int
	errBody   string
	dest      string // the x-gateway-destination-endpoint header
	metadata  string // envoy.lb's x-gateway-destination-endpoint
	rank      string
	prefiller string
	answer    []byte // the engine's answer as the gateway relayed it
	code      int    // the engine's status
}

func (o outcome) primary() string { p, _, _ := strings.Cut(o.dest, ","); return p }

func headerMap(kv map[string]string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for k, v := range kv {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return m
}

func setHeaders(c *extproc.CommonResponse) map[string]string {
	out := map[string]string{}
	for _, h := range c.GetHeaderMutation().GetSetHeaders() {
		out[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return out
}

// do runs one exchange.
func (e *envoy) do(x exchange) outcome {
	t := e.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if e.token != "" {
		ctx = metadataWithToken(ctx, e.token)
	}
	st, err := extproc.NewExternalProcessorClient(e.conn).Process(ctx)
	if err != nil {
		t.Fatalf("open ext_proc stream: %v", err)
	}
	send := func(r *extproc.ProcessingRequest) {
		t.Helper()
		if err := st.Send(r); err != nil {
			t.Fatalf("send to the picker: %v", err)
		}
	}
	recv := func() *extproc.ProcessingResponse {
		t.Helper()
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("receive from the picker: %v", err)
		}
		return r
	}
	hdrs := map[string]string{":method": "POST", ":path": x.path, ":authority": "gateway", "content-type": "application/json",
		"x-request-id": fmt.Sprintf("envoy-%d", time.Now().UnixNano())}
	for k, v := range x.headers {
		hdrs[k] = v
	}
	first := &extproc.ProcessingRequest{
		Request:        &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{Headers: headerMap(hdrs)}},
		ProtocolConfig: &extproc.ProtocolConfiguration{RequestBodyMode: e.mode, ResponseBodyMode: e.mode},
	}
	if x.subset != nil {
		var vals []*structpb.Value
		for _, a := range x.subset {
			vals = append(vals, structpb.NewStringValue(a))
		}
		first.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{
				"x-gateway-destination-endpoint-subset": structpb.NewListValue(&structpb.ListValue{Values: vals}),
			}},
		}}
	}
	send(first)
	var out outcome
	var forwarded []byte
	readPick := func(c *extproc.CommonResponse, md *structpb.Struct) {
		h := setHeaders(c)
		out.dest, out.rank, out.prefiller = h["x-gateway-destination-endpoint"], h["x-data-parallel-rank"], h["x-prefiller-host-port"]
		out.metadata = md.GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
		if !c.GetClearRouteCache() {
			t.Errorf("the pick does not clear the route cache")
		}
	}
	immediateOr := func(r *extproc.ProcessingResponse) bool {
		if im := r.GetImmediateResponse(); im != nil {
			out.status, out.errBody = int(im.GetStatus().GetCode()), string(im.GetBody())
			return true
		}
		return false
	}
	if e.mode == procmode.ProcessingMode_BUFFERED {
		// Envoy waits for the headers' answer, then sends the whole body.
		r := recv()
		if immediateOr(r) {
			return out
		}
		if r.GetRequestHeaders() == nil {
			t.Fatalf("buffered: headers answered with %v", r)
		}
		send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestBody{RequestBody: &extproc.HttpBody{Body: x.body, EndOfStream: true}}})
		r = recv()
		if immediateOr(r) {
			return out
		}
		if r.GetRequestBody() == nil {
			t.Fatalf("buffered: body answered with %v", r)
		}
		readPick(r.GetRequestBody().GetResponse(), r.GetDynamicMetadata())
		forwarded = x.body
	} else {
		for off := 0; ; off += e.chunk {
			end := min(off+e.chunk, len(x.body))
			err := st.Send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestBody{RequestBody: &extproc.HttpBody{
				Body: x.body[off:end], EndOfStream: end == len(x.body)}}})
			if errors.Is(err, io.EOF) {
				break // the picker answered early (an immediate response)
			}
			if err != nil {
				t.Fatalf("send to the picker: %v", err)
			}
			if end == len(x.body) {
				break
			}
		}
		r := recv()
		if immediateOr(r) {
			return out
		}
		if r.GetRequestHeaders() == nil {
			t.Fatalf("full duplex: first answer %v, want the headers' answer", r)
		}
		readPick(r.GetRequestHeaders().GetResponse(), r.GetDynamicMetadata())
		for {
			r := recv()
			sb := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			if sb == nil {
				t.Fatalf("full duplex: body answer %v", r)
			}
			forwarded = append(forwarded, sb.GetBody()...)
			if sb.GetEndOfStream() {
				break
			}
		}
	}
	if !bytes.Equal(forwarded, x.body) {
		t.Fatalf("the picker changed the body:\n%s\nwant\n%s", forwarded, x.body)
	}
	if x.gate != nil {
		<-x.gate
	}
	// The gateway sends the request to the endpoint named.
	target := out.primary()
	if x.serveFrom != "" {
		target = x.serveFrom
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+target+x.path, bytes.NewReader(forwarded))
	if err != nil {
		t.Fatal(err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("X-Data-Parallel-Rank", out.rank)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatalf("gateway → engine %s: %v", target, err)
	}
	defer resp.Body.Close()
	out.code = resp.StatusCode
	respHeaders := &extproc.ProcessingRequest{
		Request: &extproc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extproc.HttpHeaders{Headers: headerMap(map[string]string{
			":status": strconv.Itoa(resp.StatusCode), "content-type": resp.Header.Get("Content-Type")})}},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.lb": {Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-served": structpb.NewStringValue(target)}},
		}},
	}
	send(respHeaders)
	if r := recv(); r.GetResponseHeaders() == nil {
		t.Fatalf("response headers answered with %v", r)
	}
	buf := make([]byte, 333) // pieces cut anywhere, lines included
	pieces := 0
	for {
		n, rerr := resp.Body.Read(buf)
		eos := errors.Is(rerr, io.EOF)
		if rerr != nil && !eos {
			t.Fatalf("read the engine's answer: %v", rerr)
		}
		if n == 0 && !eos {
			continue
		}
		send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_ResponseBody{ResponseBody: &extproc.HttpBody{
			Body: append([]byte(nil), buf[:n]...), EndOfStream: eos}}})
		if e.mode == procmode.ProcessingMode_FULL_DUPLEX_STREAMED {
			sb := recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			if sb == nil {
				t.Fatalf("a response piece was not streamed back")
			}
			out.answer = append(out.answer, sb.GetBody()...)
		} else {
			if recv().GetResponseBody() == nil {
				t.Fatalf("a response piece was not answered")
			}
			out.answer = append(out.answer, buf[:n]...)
		}
		pieces++
		if x.cancelAfter > 0 && pieces == x.cancelAfter {
			cancel() // the client left: Envoy resets the stream
			return out
		}
		if eos {
			break
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("the picker's stream did not end after the answer: %v", err)
	}
	return out
}

func metadataWithToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// eppFleet is a replica with the picker on and n mock engines.
type eppFleet struct {
	rep   *replica.Replica
	base  string
	addrs map[uint64]string // worker id → ip:port
	token string            // the data-plane token, when the replica needs one
}

// active is the requests the replica holds (GET /workers).
func (f *eppFleet) active(t testing.TB) (workerCount int, active uint32) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.base+"/workers", nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var w workersReply
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /workers: %d %v", resp.StatusCode, err)
	}
	for _, wk := range w.Workers {
		for _, r := range wk.Ranks {
			active += r.ActiveRequests
		}
	}
	return len(w.Workers), active
}

func startEPPFleet(t *testing.T, n int, mutate func(*config.Config), worker func(*mockengine.ServerConfig), token ...string) *eppFleet {
	t.Helper()
	rep := StartReplica(t, func(c *config.Config) {
		c.EPPAddr = "127.0.0.1:0"
		if mutate != nil {
			mutate(c)
		}
	})
	f := &eppFleet{rep: rep, base: BaseURL(rep), addrs: map[uint64]string{}}
	if len(token) > 0 {
		f.token = token[0]
	}
	for i := 1; i <= n; i++ {
		u := StartMockWorker(t, rep, uint64(i), worker)
		f.addrs[uint64(i)] = strings.TrimPrefix(u, "http://")
	}
	testutil.Eventually(t, 10*time.Second, "mock workers registered", func() bool { w, _ := f.active(t); return w == n })
	return f
}

func (f *eppFleet) workerAt(t testing.TB, addr string) uint64 {
	for id, a := range f.addrs {
		if a == addr {
			return id
		}
	}
	t.Fatalf("endpoint %q is no worker's", addr)
	return 0
}

func (f *eppFleet) idle(t testing.TB, what string) {
	t.Helper()
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if _, n := f.active(t); n != 0 {
			return fmt.Errorf("%s: %d requests still active", what, n)
		}
		return nil
	})
}

func jsonBody(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEPPTokenIDs drives completions with token-id prompts through the
// picker: unary and streamed, full-duplex in small pieces and buffered,
// with the subset hint, a fallback the gateway served from, the
// failures the protocol names, and a client that leaves mid-stream. The
// load is back to zero after each.
func TestEPPTokenIDs(t *testing.T) {
	f := startEPPFleet(t, 3, func(c *config.Config) { c.RouterTrackOutputBlocks = true; c.MaxBodyBytes = 1 << 20 }, nil)
	gw := newEnvoy(t, f.rep)

	// A unary completion, cut into 1000-byte pieces.
	o := gw.do(exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"prompt": tokens(512, 1), "max_tokens": 8})})
	if o.status != 0 || o.code != 200 {
		t.Fatalf("unary: immediate %d %s, engine %d", o.status, o.errBody, o.code)
	}
	if o.dest != o.metadata || o.rank != "0" {
		t.Fatalf("header %q and metadata %q must agree; rank %q", o.dest, o.metadata, o.rank)
	}
	if parts := strings.Split(o.dest, ","); len(parts) != 3 {
		t.Fatalf("destination %q: want the pick and 2 fallbacks", o.dest)
	}
	var unary struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(o.answer, &unary); err != nil || unary.Usage.PromptTokens != 512 {
		t.Fatalf("relayed answer %q: %v", o.answer, err)
	}
	f.idle(t, "after a unary completion")
	home := f.workerAt(t, o.primary())

	// The same prompt again, streamed: it goes where its blocks are.
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		o = gw.do(exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"prompt": tokens(512, 1), "max_tokens": 30, "stream": true})})
		if w := f.workerAt(t, o.primary()); w != home {
			return fmt.Errorf("repeat went to worker %d, its prefix is on %d", w, home)
		}
		return nil
	})
	if n := strings.Count(string(o.answer), "data: {"); n < 30 || !strings.Contains(string(o.answer), "data: [DONE]") {
		t.Fatalf("streamed answer has %d chunks: %q", n, o.answer)
	}
	f.idle(t, "after a streamed completion")

	// Pieces of one byte, and Envoy's buffered mode.
	gw.chunk = 1
	if o = gw.do(exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"prompt": tokens(64, 2), "max_tokens": 2})}); o.status != 0 {
		t.Fatalf("one-byte pieces: %d %s", o.status, o.errBody)
	}
	gw.chunk = 1000
	gw.mode = procmode.ProcessingMode_BUFFERED
	if o = gw.do(exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"prompt": tokens(64, 3), "max_tokens": 2, "stream": true})}); o.status != 0 || o.dest == "" {
		t.Fatalf("buffered: %d %s dest %q", o.status, o.errBody, o.dest)
	}
	gw.mode = procmode.ProcessingMode_FULL_DUPLEX_STREAMED
	f.idle(t, "after one-byte pieces and buffered mode")

	// The subset hint is an allow-list.
	for _, id := range []uint64{1, 2, 3} {
		o = gw.do(exchange{path: "/v1/completions", subset: []string{f.addrs[id]},
			body: jsonBody(t, map[string]any{"prompt": tokens(512, 1), "max_tokens": 2})})
		if o.status != 0 || o.dest != f.addrs[id] {
			t.Fatalf("subset {%d}: status %d, dest %q, want %q alone", id, o.status, o.dest, f.addrs[id])
		}
	}
	f.idle(t, "after subset picks")

	// The gateway served from a fallback: the load moves there and is
	// freed there.
	o = gw.do(exchange{path: "/v1/completions", subset: []string{f.addrs[1], f.addrs[2]}, serveFrom: f.addrs[2],
		body: jsonBody(t, map[string]any{"prompt": tokens(512, 1), "max_tokens": 2})})
	if o.status != 0 {
		t.Fatalf("fallback: %d %s", o.status, o.errBody)
	}
	f.idle(t, "after a fallback served the request")

	// The failures the protocol names.
	for _, c := range []struct {
		name string
		x    exchange
		want int
	}{
		{"malformed body", exchange{path: "/v1/completions", body: []byte(`{"prompt": [1,2`)}, 400},
		{"not an object", exchange{path: "/v1/completions", body: []byte(`[1,2,3]`)}, 400},
		{"empty prompt", exchange{path: "/v1/completions", body: []byte(`{"prompt":[]}`)}, 400},
		{"text without a tokenizer", exchange{path: "/v1/completions", body: []byte(`{"prompt":"hello"}`)}, 400},
		{"client transfer params", exchange{path: "/v1/completions", body: []byte(`{"prompt":[1,2,3],"kv_transfer_params":{}}`)}, 400},
		{"path not routed", exchange{path: "/v1/embeddings", body: []byte(`{"input":"x"}`)}, 404},
		{"no endpoint in the subset", exchange{path: "/v1/completions", subset: []string{"10.9.9.9:8000"}, body: jsonBody(t, map[string]any{"prompt": tokens(64, 4)})}, 503},
		{"empty subset", exchange{path: "/v1/completions", subset: []string{}, body: jsonBody(t, map[string]any{"prompt": tokens(64, 4)})}, 503},
		{"body over max-body-bytes", exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"prompt": tokens(200000, 5)})}, 413},
	} {
		if o := gw.do(c.x); o.status != c.want || !strings.Contains(o.errBody, `"error"`) {
			t.Errorf("%s: immediate %d %s, want %d with a JSON error", c.name, o.status, o.errBody, c.want)
		}
	}
	f.idle(t, "after refusals")

	// The client leaves mid-stream: Envoy resets the stream.
	o = gw.do(exchange{path: "/v1/completions", cancelAfter: 3,
		body: jsonBody(t, map[string]any{"prompt": tokens(256, 6), "max_tokens": 2000, "stream": true})})
	if o.status != 0 {
		t.Fatalf("cancel: %d %s", o.status, o.errBody)
	}
	f.idle(t, "after the client left mid-stream")

	// A request without a body gets an endpoint, nothing recorded.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := extproc.NewExternalProcessorClient(gw.conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{
		Headers: headerMap(map[string]string{":method": "GET", ":path": "/v1/models"}), EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil || setHeaders(r.GetRequestHeaders().GetResponse())["x-gateway-destination-endpoint"] == "" {
		t.Fatalf("header-only request: %v %v", r, err)
	}

	// The picker's health service: liveness, readiness, ext_proc.
	hc := healthpb.NewHealthClient(gw.conn)
	for _, svc := range []string{"liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"} {
		testutil.EventuallyNil(t, 5*time.Second, func() error {
			res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("health %q: %v %v", svc, res, err)
			}
			return nil
		})
	}
}

// TestEPPNoWorkers: a picker without workers answers 503.
func TestEPPNoWorkers(t *testing.T) {
	f := startEPPFleet(t, 0, nil, nil)
	gw := newEnvoy(t, f.rep)
	if o := gw.do(exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"prompt": tokens(64, 1)})}); o.status != 503 {
		t.Fatalf("no workers: %d %s, want 503", o.status, o.errBody)
	}
}

// TestEPPOverloaded: with every worker over the queue threshold and a
// queue of one, a request past the queue is refused with 429 and the
// queue's figures; the queued one is routed once the load is freed.
func TestEPPOverloaded(t *testing.T) {
	f := startEPPFleet(t, 1, func(c *config.Config) {
		c.RouterQueueThreshold = 0.0001
		c.RouterMaxQueueLength = 1
		c.RouterMaxQueueWait = 20 * time.Second
	}, nil)
	gw := newEnvoy(t, f.rep)
	// One request held before the engine stays in prefill: the only
	// worker is over the threshold.
	gate := make(chan struct{})
	hold := make(chan outcome, 1)
	go func() {
		hold <- gw.do(exchange{path: "/v1/completions", gate: gate, body: jsonBody(t, map[string]any{"prompt": tokens(2048, 1), "max_tokens": 2})})
	}()
	testutil.Eventually(t, 5*time.Second, "the first request is active", func() bool { return activeRequests(t, f.base) == 1 })
	queued := make(chan outcome, 1)
	go func() {
		queued <- gw.do(exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"prompt": tokens(2048, 2), "max_tokens": 1})})
	}()
	testutil.Eventually(t, 5*time.Second, "a request waits in the queue", func() bool {
		_, m := Get(t, f.base+"/metrics")
		return metricSum(m, "kvrouter_queue_depth") == 1
	})
	if o := gw.do(exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"prompt": tokens(2048, 3), "max_tokens": 1})}); o.status != 429 ||
		!strings.Contains(o.errBody, "queue_depth") {
		t.Fatalf("over a full queue: %d %s, want 429 with the queue figures", o.status, o.errBody)
	}
	close(gate)
	if o := <-hold; o.status != 0 {
		t.Fatalf("held request: %d", o.status)
	}
	if o := <-queued; o.status != 0 {
		t.Fatalf("queued request: %d %s", o.status, o.errBody)
	}
	f.idle(t, "after the overload")
}

// TestEPPChatSessionLoRA: chat and text prompts tokenized with the served
// model's tokenizer, a sticky session, and a LoRA adapter, through the
// picker.
func TestEPPChatSessionLoRA(t *testing.T) {
	tokDir := needNPM(t, "tokenizers/qwen3")
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	f := startEPPFleet(t, 3, func(c *config.Config) {
		c.ServedModels = []string{"qwen3=" + tokDir}
		c.ServedLoRAs = []string{"sql-adapter=qwen3"}
	}, func(c *mockengine.ServerConfig) { c.Tokenizer = tok; c.Engine.Speedup = 100 })
	gw := newEnvoy(t, f.rep)

	chat := map[string]any{"model": "qwen3", "max_tokens": 4, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": "Which worker holds my prefix?"}}}
	o := gw.do(exchange{path: "/v1/chat/completions", body: jsonBody(t, chat)})
	if o.status != 0 || o.code != 200 || !strings.Contains(string(o.answer), "data: [DONE]") {
		t.Fatalf("chat: %d %s, engine %d %q", o.status, o.errBody, o.code, o.answer)
	}
	f.idle(t, "after a chat")

	text := map[string]any{"model": "qwen3", "prompt": "Once upon a time", "max_tokens": 4}
	if o = gw.do(exchange{path: "/v1/completions", body: jsonBody(t, text)}); o.status != 0 || o.code != 200 {
		t.Fatalf("text: %d %s", o.status, o.errBody)
	}
	f.idle(t, "after a text completion")

	// A session sticks to its worker (session header), wherever its
	// prompts' prefixes are.
	var bound string
	for i := range 4 {
		body := map[string]any{"model": "qwen3", "prompt": fmt.Sprintf("Turn %d of a long conversation", i), "max_tokens": 2}
		o = gw.do(exchange{path: "/v1/completions", body: jsonBody(t, body), headers: map[string]string{"x-session-id": "conv-7"}})
		if o.status != 0 {
			t.Fatalf("session turn %d: %d %s", i, o.status, o.errBody)
		}
		if bound == "" {
			bound = o.primary()
		} else if o.primary() != bound {
			t.Fatalf("session turn %d went to %s, bound to %s", i, o.primary(), bound)
		}
	}
	f.idle(t, "after a session")

	// The LoRA adapter routes with its own salt: the same prompt as the
	// base model does not count the base model's blocks.
	lora := map[string]any{"model": "sql-adapter", "prompt": "Once upon a time", "max_tokens": 2}
	if o = gw.do(exchange{path: "/v1/completions", body: jsonBody(t, lora)}); o.status != 0 || o.code != 200 {
		t.Fatalf("lora: %d %s", o.status, o.errBody)
	}
	if o = gw.do(exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"model": "no-such-model", "prompt": "x"})}); o.status != 404 ||
		!strings.Contains(o.errBody, "sql-adapter") {
		t.Fatalf("unknown model: %d %s, want 404 naming the served models", o.status, o.errBody)
	}
	f.idle(t, "after a LoRA request")
}

// TestEPPChoosesAsRoute: a prompt sequence through the picker chooses the
// workers /route chooses for it. Three prefixes are first placed on
// three different workers (the subset hint), so each later prompt has
// one best worker and no tie is left to the random tie-break.
func TestEPPChoosesAsRoute(t *testing.T) {
	f := startEPPFleet(t, 3, nil, nil)
	gw := newEnvoy(t, f.rep)
	prefix := func(fam int) []uint32 { return tokens(256, uint32(100+fam)) }
	for fam := range 3 {
		id := uint64(fam + 1)
		if o := gw.do(exchange{path: "/v1/completions", subset: []string{f.addrs[id]},
			body: jsonBody(t, map[string]any{"prompt": prefix(fam), "max_tokens": 1})}); o.status != 0 {
			t.Fatalf("placing prefix %d: %d %s", fam, o.status, o.errBody)
		}
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		for fam := range 3 {
			var got routeReply
			Post(t, f.base+"/route", map[string]any{"token_ids": prefix(fam), "update_states": false}, &got)
			if got.OverlapBlocks < 15 {
				return fmt.Errorf("prefix %d: overlap %d blocks", fam, got.OverlapBlocks)
			}
		}
		return nil
	})
	for i := range 12 {
		fam := i % 3
		prompt := append(append([]uint32(nil), prefix(fam)...), tokens(48, uint32(500+i))...)
		var want routeReply
		if code := Post(t, f.base+"/route", map[string]any{"token_ids": prompt, "update_states": false}, &want); code != 200 {
			t.Fatalf("/route: %d", code)
		}
		o := gw.do(exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"prompt": prompt, "max_tokens": 1})})
		if got := f.workerAt(t, o.primary()); got != want.WorkerID {
			t.Fatalf("prompt %d: the picker chose worker %d, /route worker %d", i, got, want.WorkerID)
		}
		f.idle(t, "between prompts")
	}
}

// TestEPPToken: with --api-token-file, a stream without the gateway's
// token is refused; the health service stays open.
func TestEPPToken(t *testing.T) {
	tokFile := tokenFile(t, "gateway-token-0123456789")
	f := startEPPFleet(t, 1, func(c *config.Config) { c.APITokenFile = tokFile }, nil, "gateway-token-0123456789")
	gw := newEnvoy(t, f.rep)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := extproc.NewExternalProcessorClient(gw.conn).Process(ctx)
	if err == nil {
		_, err = st.Recv()
	}
	if err == nil || !strings.Contains(err.Error(), "bearer token") {
		t.Fatalf("stream without a token: %v, want Unauthenticated", err)
	}
	if _, err := healthpb.NewHealthClient(gw.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "liveness"}); err != nil {
		t.Fatalf("health without a token: %v", err)
	}
	gw.token = "gateway-token-0123456789"
	if o := gw.do(exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"prompt": tokens(64, 1), "max_tokens": 1})}); o.status != 0 {
		t.Fatalf("with the token: %d %s", o.status, o.errBody)
	}
	f.idle(t, "after a request with the token")
}

// TestEPPDisaggregated: in a prefill/decode fleet the picker names the
// decode endpoint and the prefill endpoint in x-prefiller-host-port (the
// llm-d P/D sidecar's header); both hops are freed by the end of the
// answer. (The gateway here sends the request to the decode engine
// itself; with the sidecar in front of it, the sidecar runs the prefill
// hop first.)
func TestEPPDisaggregated(t *testing.T) {
	rep := StartReplica(t, func(c *config.Config) {
		c.EPPAddr = "127.0.0.1:0"
		c.MaxLocalPrefillLength = 64
	})
	f := &eppFleet{rep: rep, base: BaseURL(rep), addrs: map[uint64]string{}}
	for id, r := range map[uint64]kv.Role{1: kv.RolePrefill, 2: kv.RolePrefill, 3: kv.RoleDecode, 4: kv.RoleDecode} {
		u := StartMockWorker(t, rep, id, func(c *mockengine.ServerConfig) { c.Role = r })
		f.addrs[id] = strings.TrimPrefix(u, "http://")
	}
	testutil.Eventually(t, 10*time.Second, "mock workers registered", func() bool { w, _ := f.active(t); return w == 4 })
	gw := newEnvoy(t, rep)
	o := gw.do(exchange{path: "/v1/completions", body: jsonBody(t, map[string]any{"prompt": tokens(1024, 9), "max_tokens": 8, "stream": true})})
	if o.status != 0 || o.code != 200 {
		t.Fatalf("disaggregated: %d %s, engine %d", o.status, o.errBody, o.code)
	}
	if d := f.workerAt(t, o.primary()); d != 3 && d != 4 {
		t.Fatalf("decode endpoint is worker %d, want a decode worker", d)
	}
	if o.prefiller == "" {
		t.Fatalf("no %s header for a 1024-token prompt over max-local-prefill-length 64", "x-prefiller-host-port")
	}
	if p := f.workerAt(t, o.prefiller); p != 1 && p != 2 {
		t.Fatalf("prefill endpoint is worker %d, want a prefill worker", p)
	}
	f.idle(t, "after a disaggregated request")
}

// TestEPPKill9ThreeReplicas: three replica processes serve the picker
// (one Service in a cluster); a request routed through one of them is in
// flight when it is kill -9ed. The gateway's requests through the other
// two keep succeeding, and both drop the dead replica's load within
// memberlist's failure-detection bound. (A real gateway's connections to
// the Service move to the live replicas; here the harness talks to the
// survivors' pickers, and the victim's stream simply breaks.)
func TestEPPKill9ThreeReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 replica processes and 4 engines")
	}
	c := startProcessClusterWith(t, bench.ProcessClusterOptions{Replicas: 3, EPP: true,
		Args: []string{"--heartbeat-timeout", "1m", "--log-level", "warn"}})
	for id := uint64(1); id <= 4; id++ {
		StartMockWorkerOn(t, c.NATSURL, id, nil)
	}
	for _, r := range c.Replicas {
		base := r.BaseURL
		testutil.EventuallyNil(t, 10*time.Second, func() error {
			if n := len(workers(t, base).Workers); n != 4 {
				return fmt.Errorf("%s: %d workers", base, n)
			}
			return nil
		})
	}
	victim := c.Replicas[1]
	survivors := []*bench.ReplicaProcess{c.Replicas[0], c.Replicas[2]}

	// A request picked by the victim and held before the engine (in
	// prefill): its peers count it.
	conn, err := grpc.NewClient(victim.EPPAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := extproc.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{
		Headers: headerMap(map[string]string{":method": "POST", ":path": "/v1/completions"})}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestBody{RequestBody: &extproc.HttpBody{
		Body: jsonBody(t, map[string]any{"prompt": tokens(256, 99), "max_tokens": 100}), EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Recv(); err != nil || r.GetRequestHeaders() == nil {
		t.Fatalf("the victim's pick: %v %v", r, err)
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		for _, s := range survivors {
			if n := totalActive(t, s.BaseURL); n < 1 {
				return fmt.Errorf("%s does not see the victim's request", s.BaseURL)
			}
		}
		return nil
	})

	gws := []*envoy{newEnvoyAt(t, survivors[0].EPPAddr), newEnvoyAt(t, survivors[1].EPPAddr)}
	bound := cluster.LocalTestConfig().FailureDetectionBound(3)
	var killed time.Time
	requests := 0
	for i := 0; ; i++ {
		if i == 10 {
			killed = time.Now()
			if err := victim.Kill(); err != nil {
				t.Fatal(err)
			}
		}
		o := gws[i%2].do(exchange{path: "/v1/completions",
			body: jsonBody(t, map[string]any{"prompt": append(tokens(512, uint32(i%5)), tokens(32, uint32(1000+i))...), "max_tokens": 4})})
		if o.status != 0 || o.code != 200 {
			t.Fatalf("request %d through a survivor: immediate %d %s, engine %d", i, o.status, o.errBody, o.code)
		}
		requests++
		if !killed.IsZero() && (time.Since(killed) > bound+2*time.Second || (originsDropped(t, survivors[0].BaseURL) >= 1 && originsDropped(t, survivors[1].BaseURL) >= 1)) {
			break
		}
	}
	testutil.EventuallyNil(t, bound+2*time.Second-min(time.Since(killed), bound), func() error {
		for _, s := range survivors {
			if n := originsDropped(t, s.BaseURL); n < 1 {
				return fmt.Errorf("%s has not dropped the dead replica's requests", s.BaseURL)
			}
			if n := totalActive(t, s.BaseURL); n != 0 {
				return fmt.Errorf("%s still counts %d active requests", s.BaseURL, n)
			}
		}
		return nil
	})
	t.Logf("%d requests through the two surviving pickers, 0 failed; the victim's load dropped by both %v after kill -9 (bound %v)",
		requests, time.Since(killed).Round(time.Millisecond), bound)
}
