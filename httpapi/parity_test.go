package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/actors"
	itest "github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/parity"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// vllmLike answers completions and chats the way vLLM writes them:
// deterministic ids, a usage object on unary answers, and on streams a
// final usage-only chunk (choices []) only when stream_options.include_usage
// is true. Its prompt_tokens are the router tokenizer's count plus skew
// (a template that differs from the router's); /tokenize answers the
// same count.
type vllmLike struct {
	srv    *httptest.Server
	tok    *tokenizer.Tokenizer
	skew   atomic.Int64
	cached atomic.Int64
	mu     sync.Mutex
	bodies []string
	// tokenizeCalls counts POST /tokenize.
	tokenizeCalls atomic.Int64
}

func (e *vllmLike) promptTokens(t *testing.T, body []byte) int {
	var in textInput
	if err := json.Unmarshal(body, &in); err != nil {
		t.Errorf("engine: %v", err)
		return 0
	}
	var n int
	if in.isChat() {
		ids, _, err := e.tok.EncodeChat(tokenizer.Chat{Messages: in.Messages, AddGenerationPrompt: true})
		if err != nil {
			t.Errorf("engine: %v", err)
		}
		n = len(ids)
	} else if text, ok, _ := textPrompt(in.Prompt); ok {
		n = len(e.tok.Encode(text, true))
	} else {
		var ids []uint32
		_ = json.Unmarshal(in.Prompt, &ids)
		return len(ids)
	}
	return n + int(e.skew.Load())
}

func startVLLMLike(t *testing.T, tok *tokenizer.Tokenizer) *vllmLike {
	e := &vllmLike{tok: tok}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := e.promptTokens(t, body)
		if r.URL.Path == "/tokenize" {
			e.tokenizeCalls.Add(1)
			ids := make([]uint32, n)
			for i := range ids {
				ids[i] = uint32(i + 1)
			}
			writeJSON(w, http.StatusOK, map[string]any{"count": n, "tokens": ids})
			return
		}
		e.mu.Lock()
		e.bodies = append(e.bodies, string(body))
		e.mu.Unlock()
		var req struct {
			Stream        bool `json:"stream"`
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		_ = json.Unmarshal(body, &req)
		usage := fmt.Sprintf(`{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":%d}}`,
			n, n+2, min(e.cached.Load(), int64(n-1)))
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"cmpl-1","object":"text_completion","created":1,"model":"qwen3","choices":[{"index":0,"text":" a b","finish_reason":"length"}],"usage":%s}`, usage)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"qwen3\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n")
		fmt.Fprint(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"qwen3\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"},\"finish_reason\":\"length\"}]}\n\n")
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"qwen3\",\"choices\":[],\"usage\":%s}\n\n", usage)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *vllmLike) lastBody() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bodies[len(e.bodies)-1]
}

type parityRig struct {
	s       *Server
	url     string
	m       *metrics.Router
	tracker *parity.Tracker
}

func startParityRig(t *testing.T, models *Models, cfg parity.Config, drift parity.DriftObserver, engineURL string) *parityRig {
	t.Helper()
	acfg := actors.DefaultConfig()
	acfg.Logger = slog.New(slog.DiscardHandler)
	acfg.Shards = 2
	r, err := actors.Start(acfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: 1, DataParallelSize: 1, Url: engineURL}, true); err != nil {
		t.Fatal(err)
	}
	itest.Eventually(t, 5*time.Second, "worker registered", func() bool {
		reg, err := r.Registry(context.Background())
		return err == nil && len(reg.Workers) == 1
	})
	tracker, err := parity.New(cfg, drift)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	s := New(Options{Router: r, Metrics: m, BlockSize: acfg.BlockSize, MaxBodyBytes: 1 << 20, Proxy: true,
		Models: models, Log: slog.New(slog.DiscardHandler), Client: http.DefaultClient, Parity: tracker})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &parityRig{s: s, url: srv.URL, m: m, tracker: tracker}
}

func rawPost(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// TestStreamUsageStripped: through the proxy a client gets, byte for
// byte, what the engine sends it directly, whether or not it asked for
// the usage chunk; the engine is asked for usage either way, and the
// router reads it from every answer.
func TestStreamUsageStripped(t *testing.T) {
	models := testModels(t)
	e := startVLLMLike(t, models.byName["qwen3"].tok)
	g := startParityRig(t, models, parity.DefaultConfig(), nil, e.srv.URL)
	cases := []struct {
		name, path, body string
		wantInjected     bool
	}{
		{"chat stream, no usage asked", "/v1/chat/completions", `{"model":"qwen3","stream":true,"messages":` + chatMessages + `}`, true},
		{"chat stream, usage asked", "/v1/chat/completions", `{"model":"qwen3","stream":true,"stream_options":{"include_usage":true},"messages":` + chatMessages + `}`, false},
		{"chat stream, usage refused", "/v1/chat/completions", `{"model":"qwen3","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":false},"messages":` + chatMessages + `}`, true},
		{"chat stream, continuous usage without usage", "/v1/chat/completions", `{"model":"qwen3","stream":true,"stream_options":{"continuous_usage_stats":true},"messages":` + chatMessages + `}`, true},
		{"completion stream", "/v1/completions", `{"model":"qwen3","stream":true,"prompt":"Once upon a time"}`, true},
		{"chat unary", "/v1/chat/completions", `{"model":"qwen3","messages":` + chatMessages + `}`, false},
		{"completion unary, token ids", "/v1/completions", `{"model":"qwen3","prompt":[1,2,3,4,5]}`, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, direct := rawPost(t, e.srv.URL+tc.path, tc.body)
			if code != 200 {
				t.Fatalf("engine: %d %s", code, direct)
			}
			code, via := rawPost(t, g.url+tc.path, tc.body)
			if code != 200 {
				t.Fatalf("proxy: %d %s", code, via)
			}
			if !bytes.Equal(direct, via) {
				t.Fatalf("the client's bytes differ:\ndirect: %q\nproxy:  %q", direct, via)
			}
			forwarded := e.lastBody()
			var f struct {
				StreamOptions map[string]any `json:"stream_options"`
			}
			_ = json.Unmarshal([]byte(forwarded), &f)
			injected := forwarded != tc.body
			if injected != tc.wantInjected || (injected && f.StreamOptions["include_usage"] != true) {
				t.Fatalf("engine got %s", forwarded)
			}
			if !strings.Contains(tc.body, "stream_options") && injected &&
				forwarded != strings.TrimSuffix(tc.body, "}")+`,"stream_options":{"include_usage":true}}` {
				t.Fatalf("the client's bytes were not kept: %s", forwarded)
			}
			if strings.Contains(tc.body, "continuous_usage_stats") && f.StreamOptions["continuous_usage_stats"] != false {
				t.Fatalf("other stream options lost: %s", forwarded)
			}
			if n := testutil.ToFloat64(g.m.Parity.Compared.WithLabelValues("qwen3")); n != float64(i+1) {
				t.Fatalf("compared %v requests, want %d (usage not read)", n, i+1)
			}
		})
	}
	if n := testutil.CollectAndCount(g.m.Parity.WithoutUsage); n != 0 {
		t.Fatalf("requests without usage: %d series", n)
	}
}

// TestParitySwitch: a model whose engine counts tokens differently is
// switched to engine tokenization after MinSamples requests, shown in
// /v1/models and /workers; the operator's reset and a clean window of
// background checks switch it back; requests without usage are counted.
func TestParitySwitch(t *testing.T) {
	models, err := LoadModels(ModelSpec{Served: []string{"qwen3=" + qwen3Dir(t)}})
	if err != nil {
		t.Fatal(err)
	}
	e := startVLLMLike(t, models.byName["qwen3"].tok)
	e.skew.Store(2)
	cfg := parity.DefaultConfig()
	cfg.Window, cfg.MinSamples, cfg.MismatchThreshold, cfg.CleanWindow = 8, 4, 0.5, 3
	var drifts atomic.Int64
	g := startParityRig(t, models, cfg, parity.DriftFunc(func(parity.RankKey, parity.Drift) { drifts.Add(1) }), e.srv.URL)
	chat := func(i int) {
		t.Helper()
		body := fmt.Sprintf(`{"model":"qwen3","messages":[{"role":"user","content":"question %d about caches"}]}`, i)
		if code, raw := rawPost(t, g.url+"/v1/chat/completions", body); code != 200 {
			t.Fatalf("chat %d: %d %s", i, code, raw)
		}
	}
	mode := func() string {
		t.Helper()
		var list struct {
			Data []struct {
				Tokenization string              `json:"kvrouter_tokenization"`
				Parity       *parity.ModelStatus `json:"kvrouter_parity"`
			} `json:"data"`
		}
		code, raw := rawGet(t, g.url+"/v1/models")
		if err := json.Unmarshal(raw, &list); code != 200 || err != nil || len(list.Data) != 1 {
			t.Fatalf("/v1/models: %d %s", code, raw)
		}
		return list.Data[0].Tokenization
	}
	for i := 0; i < 3; i++ {
		chat(i)
	}
	if m := mode(); m != "router" {
		t.Fatalf("switched before min samples: %s", m)
	}
	chat(3)
	if m := mode(); m != "engine" {
		t.Fatalf("not switched after 4 mismatches: %s", m)
	}
	if n := testutil.ToFloat64(g.m.Parity.TokenMismatch.WithLabelValues("qwen3")); n != 4 {
		t.Fatalf("mismatches %v, want 4", n)
	}
	if n := testutil.ToFloat64(g.m.Parity.Switches.WithLabelValues("qwen3", "engine")); n != 1 {
		t.Fatalf("switches %v", n)
	}
	// Switched: prompts go through the engine's /tokenize, whose count
	// matches the engine's usage; the background checks (router's own
	// count, still off by 2) keep it switched.
	before := e.tokenizeCalls.Load()
	chat(100)
	if e.tokenizeCalls.Load() == before {
		t.Fatal("a switched model was not tokenized by the engine")
	}
	itest.Eventually(t, 5*time.Second, "background check", func() bool {
		return testutil.ToFloat64(g.m.Parity.Checks.WithLabelValues("qwen3", "mismatch")) >= 1
	})
	code, raw := rawGet(t, g.url+"/workers")
	var ws struct {
		Workers []any          `json:"workers"`
		Parity  *parity.Status `json:"parity"`
	}
	if err := json.Unmarshal(raw, &ws); code != 200 || err != nil || len(ws.Workers) != 1 || ws.Parity == nil ||
		len(ws.Parity.Models) != 1 || ws.Parity.Models[0].Tokenization != parity.ModeEngine {
		t.Fatalf("/workers: %d %s", code, raw)
	}
	// The operator switches it back.
	if code, raw := rawPost(t, g.url+"/parity/qwen3/reset", ``); code != 200 || !strings.Contains(string(raw), `"was_switched":true`) {
		t.Fatalf("reset: %d %s", code, raw)
	}
	if code, _ := rawPost(t, g.url+"/parity/nope/reset", ``); code != 404 {
		t.Fatalf("reset of an unknown model: %d", code)
	}
	if m := mode(); m != "router" {
		t.Fatalf("after reset: %s", m)
	}
	// Broken again, then the engine's template is fixed: a clean window
	// of background checks switches back without the operator.
	for i := 0; i < 4; i++ {
		chat(200 + i)
	}
	if m := mode(); m != "engine" {
		t.Fatalf("not switched again: %s", m)
	}
	e.skew.Store(0)
	for i := 0; i < 40 && mode() == "engine"; i++ {
		chat(300 + i)
		time.Sleep(20 * time.Millisecond) // one background check at a time
	}
	if m := mode(); m != "router" {
		t.Fatalf("clean window did not switch back: %s", m)
	}
	if n := testutil.ToFloat64(g.m.Parity.Switches.WithLabelValues("qwen3", "router")); n != 2 {
		t.Fatalf("switches back %v, want 2", n)
	}
}

// TestWithoutUsage: answers the router cannot compare are counted by
// reason, and the client still gets them unchanged.
func TestWithoutUsage(t *testing.T) {
	answers := map[string]struct {
		status int
		ctype  string
		body   string
	}{
		"missing":      {200, "application/json", `{"choices":[]}`},
		"malformed":    {200, "application/json", `{"choices":[],"usage":{"prompt_tokens":"many"}}`},
		"worker_error": {500, "application/json", `{"error":"boom"}`},
		"stream_cut":   {200, "text/event-stream", "data: {\"choices\":[{\"delta\":{}}]}\n\n"},
	}
	var next atomic.Value
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[next.Load().(string)]
		w.Header().Set("Content-Type", a.ctype)
		w.WriteHeader(a.status)
		fmt.Fprint(w, a.body)
		if a.ctype == "text/event-stream" {
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection dies mid-stream
		}
	}))
	t.Cleanup(eng.Close)
	g := startParityRig(t, testModels(t), parity.DefaultConfig(), nil, eng.URL)
	for _, reason := range []string{"missing", "malformed", "worker_error", "stream_cut"} {
		next.Store(reason)
		body := `{"model":"qwen3","prompt":[1,2,3]}`
		if reason == "stream_cut" {
			body = `{"model":"qwen3","prompt":[1,2,3],"stream":true}`
		}
		code, raw := rawPost(t, g.url+"/v1/completions", body)
		if code != answers[reason].status || !strings.HasPrefix(string(raw), answers[reason].body[:10]) {
			t.Fatalf("%s: client got %d %q", reason, code, raw)
		}
		if n := testutil.ToFloat64(g.m.Parity.WithoutUsage.WithLabelValues("qwen3", reason)); n != 1 {
			t.Fatalf("%s counted %v times", reason, n)
		}
	}
	if n := testutil.ToFloat64(g.m.Parity.Compared.WithLabelValues("qwen3")); n != 0 {
		t.Fatalf("compared %v", n)
	}
}

func rawGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// TestParityResetIsAdmin: the switch back is an admin route (401 without
// the admin token, 200 with it); GET /parity is data plane.
func TestParityResetIsAdmin(t *testing.T) {
	tracker, err := parity.New(parity.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := startRig(t, rigOpts{workers: 1, mutate: func(o *Options) {
		o.AdminTokens = StaticTokens(adminToken)
		o.Models, o.Parity = testModels(t), tracker
	}})
	if code, out, _ := call(t, "POST", g.url+"/parity/qwen3/reset", "", ""); code != 401 {
		t.Fatalf("reset without the admin token: %d %v", code, out)
	}
	if code, out, _ := call(t, "POST", g.url+"/parity/qwen3/reset", adminToken, ""); code != 200 || out["tokenization"] != "router" {
		t.Fatalf("reset with the admin token: %d %v", code, out)
	}
	if code, out, _ := call(t, "GET", g.url+"/parity", "", ""); code != 200 || out["models"] == nil {
		t.Fatalf("GET /parity: %d %v", code, out)
	}
}

// A unary answer far longer than what the proxy keeps (an output of
// megabytes, split over many lines as an engine may write it) is still
// compared: the usage is read from the answer's end, and the client gets
// every byte.
func TestLongUnaryAnswerIsCompared(t *testing.T) {
	var body strings.Builder
	body.WriteString(`{"choices":[{"text":"`)
	for range 20000 {
		body.WriteString(`a \"usage\": {\"prompt_tokens\": 1} line\n`)
	}
	body.WriteString(`","finish_reason":"length"}],` + "\n" + `"usage":{"prompt_tokens":3,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":0}}}`)
	want := body.String()
	if len(want) < 4*usageTail {
		t.Fatalf("answer of %d bytes is not longer than what the proxy keeps", len(want))
	}
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, want)
	}))
	t.Cleanup(eng.Close)
	g := startParityRig(t, testModels(t), parity.DefaultConfig(), nil, eng.URL)
	code, raw := rawPost(t, g.url+"/v1/completions", `{"model":"qwen3","prompt":[1,2,3]}`)
	if code != 200 || string(raw) != want {
		t.Fatalf("client got %d and %d bytes, want the engine's %d", code, len(raw), len(want))
	}
	if n := testutil.ToFloat64(g.m.Parity.Compared.WithLabelValues("qwen3")); n != 1 {
		t.Fatalf("compared %v times, want 1 (without usage: %v)", n,
			testutil.ToFloat64(g.m.Parity.WithoutUsage.WithLabelValues("qwen3", "malformed"))+
				testutil.ToFloat64(g.m.Parity.WithoutUsage.WithLabelValues("qwen3", "missing")))
	}
}

// TestClientLeavesAfterDone: a client that stops reading at "data:
// [DONE]" (as OpenAI SDKs do) and closes the connection before the
// engine ends its response has the whole answer: the proxy counts it ok
// and compares its usage, rather than calling it a cut stream. The
// engine here holds its response open after [DONE] until the proxy
// hangs up, which makes the client's close land before the end.
func TestClientLeavesAfterDone(t *testing.T) {
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(eng.Close)
	g := startParityRig(t, testModels(t), parity.DefaultConfig(), nil, eng.URL)
	resp, err := http.Post(g.url+"/v1/completions", "application/json", strings.NewReader(`{"model":"qwen3","prompt":[1,2,3],"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before [DONE]: %v", err)
		}
		if strings.TrimSpace(line) == "data: [DONE]" {
			break
		}
	}
	resp.Body.Close() // before EOF: the transport closes the connection
	// The answer is compared (and its request freed) at [DONE]; its
	// outcome is counted once the engine's stream ends.
	itest.Eventually(t, 5*time.Second, "answer compared and its outcome counted", func() bool {
		outcomes := testutil.ToFloat64(g.m.ProxyRequests.WithLabelValues("ok")) + testutil.ToFloat64(g.m.ProxyRequests.WithLabelValues("client_gone"))
		return testutil.ToFloat64(g.m.Parity.Compared.WithLabelValues("qwen3")) == 1 && outcomes >= 1
	})
	if n := testutil.CollectAndCount(g.m.Parity.WithoutUsage); n != 0 {
		t.Fatalf("answer counted as not compared: %d series", n)
	}
	if n := testutil.ToFloat64(g.m.ProxyRequests.WithLabelValues("ok")); n != 1 {
		t.Fatalf("proxy outcome ok %v, want 1 (client_gone %v)", n, testutil.ToFloat64(g.m.ProxyRequests.WithLabelValues("client_gone")))
	}
}
