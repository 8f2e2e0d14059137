package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/parity"
)

// specPath is the HTTP API's OpenAPI document, which docs/http-api.md is
// generated from.
const specPath = "../docs/openapi.yaml"

const (
	specClientToken = "client-token"
	specAdminToken  = "admin-token"
	// specOrigin is the spec's server: requests are matched against it.
	specOrigin = "http://127.0.0.1:8080"
)

var (
	specOnce   sync.Once
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error
)

func loadSpec(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	specOnce.Do(func() {
		// Streams and profile pages are text: read as strings.
		openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.FileBodyDecoder)
		openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.FileBodyDecoder)
		loader := openapi3.NewLoader()
		specDoc, specErr = loader.LoadFromFile(specPath)
		if specErr != nil {
			return
		}
		if specErr = specDoc.Validate(context.Background()); specErr != nil {
			specErr = fmt.Errorf("%s is not a valid OpenAPI document: %w", specPath, specErr)
			return
		}
		specRouter, specErr = legacy.NewRouter(specDoc)
	})
	if specErr != nil {
		t.Fatal(specErr)
	}
	return specDoc, specRouter
}

// specServer is a server with every optional route on (proxy, parity,
// pprof, metrics), client and admin tokens, a session header, and two
// workers whose URL is an engine stub answering every completion.
func specServer(t *testing.T) *Server { return specServerWith(t, nil) }

// specServerWith is specServer with its options changed by mutate.
func specServerWith(t *testing.T, mutate func(*Options)) *Server {
	t.Helper()
	engine := startEchoWorker(t)
	cfg := actors.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Shards = 2
	r, err := actors.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	for i := 1; i <= 2; i++ {
		if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: uint64(i), DataParallelSize: 1, Url: engine.srv.URL}, true); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "workers registered", func() bool {
		reg, err := r.Registry(context.Background())
		return err == nil && len(reg.Workers) == 2
	})
	tracker, err := parity.New(parity.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Router: r, Metrics: metrics.New(), BlockSize: cfg.BlockSize, MaxBodyBytes: 1 << 20,
		Proxy: true, Parity: tracker, Pprof: true, Client: http.DefaultClient, Log: slog.New(slog.DiscardHandler),
		APITokens: StaticTokens(specClientToken), AdminTokens: StaticTokens(specAdminToken), SessionHeader: "X-Session-Id", SessionBodyField: "session_id"}
	if mutate != nil {
		mutate(&opts)
	}
	return New(opts)
}

type specCase struct {
	name         string
	method, path string
	token        string // bearer token ("" = none)
	body         string
	header       []string // extra header name, value pairs
	// specValid: the spec accepts the request; want: the handler's status.
	specValid bool
	want      int
}

// specCases run in order (later ones use what earlier ones created).
func specCases() []specCase {
	const c, a = specClientToken, specAdminToken
	prompt := `[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33]`
	return []specCase{
		{"route", "POST", "/route", c, `{"request_id":"r1","token_ids":` + prompt + `}`, nil, true, 200},
		{"route with a session", "POST", "/route", c, `{"request_id":"r2","token_ids":` + prompt + `}`, []string{"X-Session-Id", "s1"}, true, 200},
		{"route with a session in the body", "POST", "/route", c, `{"request_id":"r4","session_id":"s2","token_ids":` + prompt + `}`, nil, true, 200},
		{"route with a session id that is not a string", "POST", "/route", c, `{"session_id":7,"token_ids":[1,2]}`, nil, false, 400},
		{"route with an empty session header", "POST", "/route", c, `{"token_ids":[1,2]}`, []string{"X-Session-Id", ""}, false, 400},
		{"route with an override and a pinned worker", "POST", "/route", c, `{"request_id":"r3","token_ids":[1,2],"pinned_worker":{"worker_id":2,"dp_rank":0},"router_config_override":{"overlap_score_weight":0.5}}`, nil, true, 200},
		{"route explained by the header", "POST", "/route", c, `{"request_id":"r5","token_ids":` + prompt + `}`, []string{"X-Kvrouter-Explain", "1"}, true, 200},
		{"route explained by the body, with a model", "POST", "/route", c, `{"request_id":"r6","model":"m","explain":true,"token_ids":` + prompt + `}`, nil, true, 200},
		{"route with a model name too long", "POST", "/route", c, `{"model":"` + strings.Repeat("m", 257) + `","token_ids":[1,2]}`, nil, false, 400},
		{"route explain not a boolean", "POST", "/route", c, `{"explain":"yes","token_ids":[1,2]}`, nil, false, 400},
		{"decision", "GET", "/decisions/r5", a, "", nil, true, 200},
		{"decision never kept", "GET", "/decisions/never-routed", a, "", nil, true, 404},
		{"decision with a client token", "GET", "/decisions/r5", c, "", nil, true, 401},
		{"decision without a token", "GET", "/decisions/r5", "", "", nil, false, 401},
		{"route garbage body", "POST", "/route", c, `{"token_ids":`, nil, false, 400},
		{"route unknown field", "POST", "/route", c, `{"token_ids":[1,2],"tokens":[1,2]}`, nil, false, 400},
		{"route unknown field before the token ids", "POST", "/route", c, `{"max_tokens":3,"token_ids":[1,2]}`, nil, false, 400},
		{"route unknown field in pinned_worker", "POST", "/route", c, `{"token_ids":[1,2],"pinned_worker":{"worker_id":2,"rank":0}}`, nil, false, 400},
		{"route unknown field in the override", "POST", "/route", c, `{"token_ids":[1,2],"router_config_override":{"temperature":0.5}}`, nil, false, 400},
		{"route negative token id", "POST", "/route", c, `{"token_ids":[-1]}`, nil, false, 400},
		{"route token ids as a string", "POST", "/route", c, `{"token_ids":"1,2"}`, nil, false, 400},
		{"route without a token", "POST", "/route", "", `{"token_ids":[1,2]}`, nil, false, 401},
		{"route with a wrong token", "POST", "/route", "nope", `{"token_ids":[1,2]}`, nil, true, 401},
		{"prefill_done", "POST", "/prefill_done", c, `{"request_id":"r1"}`, nil, true, 200},
		{"prefill_done without request_id", "POST", "/prefill_done", c, `{}`, nil, false, 400},
		{"prefill_done unknown field", "POST", "/prefill_done", c, `{"request_id":"r1","worker_id":1}`, nil, false, 400},
		{"free", "POST", "/free", c, `{"request_id":"r1"}`, nil, true, 200},
		{"free an unknown request", "POST", "/free", c, `{"request_id":"never-routed"}`, nil, true, 404},
		{"free garbage body", "POST", "/free", c, `not json`, nil, false, 400},
		{"free empty request_id", "POST", "/free", c, `{"request_id":""}`, nil, false, 400},
		{"free unknown field", "POST", "/free", c, `{"request_id":"r1","requestId":"r1"}`, nil, false, 400},
		{"overlap_scores", "POST", "/overlap_scores", c, `{"token_ids":` + prompt + `}`, nil, true, 200},
		{"overlap_scores bad token ids", "POST", "/overlap_scores", c, `{"token_ids":[1.5]}`, nil, false, 400},
		{"overlap_scores unknown field", "POST", "/overlap_scores", c, `{"token_ids":[1],"request_id":"x"}`, nil, false, 400},
		{"potential_loads", "POST", "/potential_loads", c, `{"token_ids":` + prompt + `}`, nil, true, 200},
		{"potential_loads without a token", "POST", "/potential_loads", "", `{"token_ids":[1]}`, nil, false, 401},
		{"potential_loads unknown field", "POST", "/potential_loads", c, `{"token_ids":[1],"lora":"x"}`, nil, false, 400},
		{"list workers", "GET", "/workers", c, "", nil, true, 200},
		{"list workers with digest", "GET", "/workers?digest=1", c, "", nil, true, 200},
		{"list workers bad digest", "GET", "/workers?digest=maybe", c, "", nil, false, 400},
		{"add worker", "POST", "/workers", a, `{"worker_id":7,"url":"http://10.1.2.3:8000","data_parallel_size":2,"role":"decode","model_name":"m"}`, nil, true, 200},
		{"add worker unknown field", "POST", "/workers", a, `{"worker_id":8,"bogus":1}`, nil, false, 400},
		{"add worker without worker_id", "POST", "/workers", a, `{"url":"http://10.1.2.3:8000"}`, nil, false, 400},
		{"add worker dp size 0", "POST", "/workers", a, `{"worker_id":8,"data_parallel_size":0}`, nil, false, 400},
		{"add worker bad role", "POST", "/workers", a, `{"worker_id":8,"role":"leader"}`, nil, false, 400},
		{"add worker garbage body", "POST", "/workers", a, `{"worker_id":`, nil, false, 400},
		{"add worker without a token", "POST", "/workers", "", `{"worker_id":8}`, nil, false, 401},
		{"add worker with a client token", "POST", "/workers", c, `{"worker_id":8}`, nil, true, 401},
		{"list workers after add", "GET", "/workers", c, "", nil, true, 200},
		{"delete worker", "DELETE", "/workers/7", a, "", nil, true, 200},
		{"delete unknown worker", "DELETE", "/workers/99", a, "", nil, true, 404},
		{"delete worker bad id", "DELETE", "/workers/abc", a, "", nil, false, 400},
		{"get session", "GET", "/sessions/s1", c, "", nil, true, 200},
		{"get session from the body", "GET", "/sessions/s2", c, "", nil, true, 200},
		{"get unknown session", "GET", "/sessions/none", c, "", nil, true, 404},
		{"end session", "DELETE", "/sessions/s1", c, "", nil, true, 200},
		{"end unknown session", "DELETE", "/sessions/s1", c, "", nil, true, 404},
		{"models", "GET", "/v1/models", c, "", nil, true, 200},
		{"models without a token", "GET", "/v1/models", "", "", nil, false, 401},
		{"completion", "POST", "/v1/completions", c, `{"prompt":` + prompt + `,"max_tokens":3,"temperature":0}`, nil, true, 200},
		{"completion explained", "POST", "/v1/completions", c, `{"prompt":` + prompt + `,"max_tokens":3}`, []string{"X-Kvrouter-Explain", "1"}, true, 200},
		{"completion stream", "POST", "/v1/completions", c, `{"prompt":` + prompt + `,"max_tokens":3,"stream":true}`, nil, true, 200},
		{"completion without a prompt", "POST", "/v1/completions", c, `{"max_tokens":3}`, nil, false, 400},
		{"completion garbage body", "POST", "/v1/completions", c, `[`, nil, false, 400},
		{"completion that already went through a router", "POST", "/v1/completions", c, `{"prompt":[1,2]}`, []string{HopHeader, "other"}, true, 508},
		{"chat completion without a tokenizer", "POST", "/v1/chat/completions", c, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil, true, 400},
		{"chat completion messages not an array", "POST", "/v1/chat/completions", c, `{"messages":"hi"}`, nil, false, 400},
		{"parity", "GET", "/parity", c, "", nil, true, 200},
		{"parity reset of an unserved model", "POST", "/parity/qwen3/reset", a, "", nil, true, 404},
		{"parity reset without a token", "POST", "/parity/qwen3/reset", "", "", nil, false, 401},
		{"healthz", "GET", "/healthz", "", "", nil, true, 200},
		{"readyz", "GET", "/readyz", "", "", nil, true, 200},
		{"metrics", "GET", "/metrics", "", "", nil, true, 200},
		{"pprof index", "GET", "/debug/pprof/", a, "", nil, true, 200},
		{"pprof symbol", "GET", "/debug/pprof/symbol", a, "", nil, true, 200},
		{"pprof profile without a token", "GET", "/debug/pprof/profile", "", "", nil, false, 401},
		{"unknown path", "GET", "/nope", c, "", nil, false, 404},
	}
}

func (c specCase) request(t *testing.T) *http.Request {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req := httptest.NewRequest(c.method, specOrigin+c.path, body)
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(c.header); i += 2 {
		req.Header.Set(c.header[i], c.header[i+1])
	}
	return req
}

// bearerPresent is the spec's view of the security schemes: a bearer
// token must be sent (whether it is the right one only the server knows).
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if _, ok := bearer(in.RequestValidationInput.Request); !ok {
		return fmt.Errorf("%s: no bearer token", in.SecuritySchemeName)
	}
	return nil
}

// TestOpenAPIMatchesHandlers sends valid and invalid requests to the real
// handlers: the spec must accept exactly the valid ones, the handler must
// answer each with the expected status, and every answer (status, content
// type, body) must be one the spec documents.
func TestOpenAPIMatchesHandlers(t *testing.T) {
	_, router := loadSpec(t)
	s := specServer(t)
	for _, c := range specCases() {
		req := c.request(t)
		route, params, findErr := router.FindRoute(req)
		var reqErr error
		var in *openapi3filter.RequestValidationInput
		if findErr != nil {
			reqErr = findErr
		} else {
			in = &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: bearerPresent}}
			reqErr = openapi3filter.ValidateRequest(context.Background(), in)
		}
		if c.specValid && reqErr != nil {
			t.Errorf("%s: the spec refuses a valid request: %v", c.name, reqErr)
		}
		if !c.specValid && reqErr == nil {
			t.Errorf("%s: the spec accepts an invalid request", c.name)
		}

		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, c.request(t))
		if rec.Code != c.want {
			t.Errorf("%s: status %d, want %d (body %.300s)", c.name, rec.Code, c.want, rec.Body.String())
		}
		if route == nil {
			// Not a documented route: the answer is still the
			// documented error body.
			schema := specDoc.Components.Schemas["Error"].Value
			if err := validateJSON(schema, rec.Body.Bytes()); err != nil {
				t.Errorf("%s: the answer is not an Error body: %v", c.name, err)
			}
			continue
		}
		in.Request = c.request(t)
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
			Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes())), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("%s: the answer (%d %.300s) does not match the spec: %v", c.name, rec.Code, rec.Body.String(), err)
		}
	}
}

func validateJSON(schema *openapi3.Schema, body []byte) error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return err
	}
	return schema.VisitJSON(v)
}

// TestOpenAPIListsEveryRoute: the spec documents exactly the routes the
// server registers (with every optional route on), method by method.
func TestOpenAPIListsEveryRoute(t *testing.T) {
	doc, _ := loadSpec(t)
	s := specServer(t)
	var registered []string
	for _, rt := range s.routes {
		method, path, found := strings.Cut(rt.pattern, " ")
		if !found { // a pattern without a method serves every method; pprof's are read with GET
			method, path = "GET", rt.pattern
		}
		registered = append(registered, method+" "+path)
		// The route's access is the operation's security.
		item := doc.Paths.Find(path)
		if item == nil || item.GetOperation(method) == nil {
			continue // reported below
		}
		sec := doc.Security
		if op := item.GetOperation(method); op.Security != nil {
			sec = *op.Security
		}
		want := map[access]string{open: "", dataPlane: "apiToken", adminOnly: "adminToken"}[rt.access]
		var got []string
		for _, req := range sec {
			for name := range req {
				got = append(got, name)
			}
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%s %s: the spec's security is %q, the server's access wants %q", method, path, got, want)
		}
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	sort.Strings(registered)
	sort.Strings(documented)
	registered = slices.Compact(registered)
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("%s is served but not in %s", r, specPath)
		}
	}
	for _, d := range documented {
		if !slices.Contains(registered, d) {
			t.Errorf("%s is in %s but not served", d, specPath)
		}
	}
}

// specVariant is a server configured differently from specServer, and the
// requests that reach its other answers.
type specVariant struct {
	name   string
	mutate func(*Options)
	cases  []specCase // specValid is not used: these probe the server's configuration
}

// TestOpenAPIAnswersOfOtherConfigurations: the answers that only other
// configurations give (no admin token, a separate admin listener, a small
// body limit, a replica not ready, served models) are the documented ones.
func TestOpenAPIAnswersOfOtherConfigurations(t *testing.T) {
	_, router := loadSpec(t)
	big := `{"token_ids":[` + strings.Repeat("1,", 600) + `1]}`
	variants := []specVariant{
		{"no admin token: admin routes answer loopback clients only", func(o *Options) { o.AdminTokens = nil }, []specCase{
			{name: "add worker from a remote client", method: "POST", path: "/workers", body: `{"worker_id":9}`, want: 403},
			{name: "delete worker from a remote client", method: "DELETE", path: "/workers/1", want: 403},
			{name: "pprof from a remote client", method: "GET", path: "/debug/pprof/", want: 403},
		}},
		{"admin routes on a separate listener", func(o *Options) { o.AdminSeparate = true }, []specCase{
			{name: "add worker on the main listener", method: "POST", path: "/workers", token: specAdminToken, body: `{"worker_id":9}`, want: 404},
		}},
		{"small body limit, not ready", func(o *Options) {
			o.MaxBodyBytes = 1000
			o.Ready = func() error { return fmt.Errorf("no gossip peers yet") }
		}, []specCase{
			{name: "route body over the limit", method: "POST", path: "/route", token: specClientToken, body: big, want: 413},
			{name: "readyz not ready", method: "GET", path: "/readyz", want: 503},
		}},
		{"parity off", func(o *Options) { o.Parity = nil }, []specCase{
			{name: "add worker with a ZMQ endpoint and no ZMQ ingestion", method: "POST", path: "/workers", token: specAdminToken, body: `{"worker_id":9,"kv_events_endpoint":"tcp://10.1.2.3:5557"}`, want: 400},
			{name: "add worker with a block size not the router's", method: "POST", path: "/workers", token: specAdminToken, body: `{"worker_id":9,"block_size":3}`, want: 400},
			{name: "add worker at a public address", method: "POST", path: "/workers", token: specAdminToken, body: `{"worker_id":9,"url":"http://8.8.8.8:8000"}`, want: 400},
		}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			s := specServerWith(t, v.mutate)
			for _, c := range v.cases {
				checkAnswer(t, router, s, c)
			}
		})
	}
}

// TestOpenAPIModelAnswers: with served models (the Qwen3 tokenizer), the
// text and chat answers and the model list match the spec.
func TestOpenAPIModelAnswers(t *testing.T) {
	_, router := loadSpec(t)
	models := testModels(t)
	s := specServerWith(t, func(o *Options) { o.Models = models })
	c := specClientToken
	for _, sc := range []specCase{
		{name: "models", method: "GET", path: "/v1/models", token: c, want: 200},
		{name: "route a text prompt", method: "POST", path: "/route", token: c, body: `{"model":"qwen3","prompt":"Once upon a time"}`, want: 200},
		{name: "route chat messages", method: "POST", path: "/route", token: c, body: `{"model":"qwen3","messages":` + chatMessages + `}`, want: 200},
		{name: "overlap_scores of a text prompt", method: "POST", path: "/overlap_scores", token: c, body: `{"model":"qwen3","prompt":"Once upon a time"}`, want: 200},
		{name: "route an unknown model", method: "POST", path: "/route", token: c, body: `{"model":"nope","prompt":"hi"}`, want: 404},
		{name: "chat completion of an unknown model", method: "POST", path: "/v1/chat/completions", token: c, body: `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, want: 404},
		{name: "chat completion", method: "POST", path: "/v1/chat/completions", token: c, body: `{"model":"qwen3","messages":` + chatMessages + `,"max_tokens":3}`, want: 200},
		{name: "completion of a text prompt", method: "POST", path: "/v1/completions", token: c, body: `{"model":"qwen3-lora","prompt":"Once upon a time","max_tokens":3}`, want: 200},
		{name: "parity reset", method: "POST", path: "/parity/qwen3/reset", token: specAdminToken, want: 200},
		{name: "parity reset of an unknown model", method: "POST", path: "/parity/nope/reset", token: specAdminToken, want: 404},
	} {
		checkAnswer(t, router, s, sc)
	}
}

// checkAnswer sends one request and checks the handler's status and that
// the answer is one the spec documents for the route.
func checkAnswer(t *testing.T, router routers.Router, s *Server, c specCase) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, c.request(t))
	if rec.Code != c.want {
		t.Errorf("%s: status %d, want %d (body %.300s)", c.name, rec.Code, c.want, rec.Body.String())
	}
	req := c.request(t)
	route, params, err := router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
		Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes())), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s: the answer (%d %.300s) does not match the spec: %v", c.name, rec.Code, rec.Body.String(), err)
	}
}
