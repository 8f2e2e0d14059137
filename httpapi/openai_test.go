package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// qwen3Dir is the Qwen3 tokenizer fetched by `make node-deps` (the
// tokenizer package's golden tests use it too).
func qwen3Dir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KVROUTER_NPM_CACHE")
	if dir == "" {
		dir = filepath.Join("..", ".cache", "npm")
	}
	dir = filepath.Join(dir, "tokenizers", "qwen3")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		if os.Getenv("KVROUTER_OFFLINE") != "" {
			t.Skipf("the Qwen3 tokenizer is not fetched (%v) and KVROUTER_OFFLINE is set: skipping", err)
		}
		t.Fatalf("the Qwen3 tokenizer is not fetched (%v): run `make node-deps` (or set KVROUTER_OFFLINE=1 to skip)", err)
	}
	return dir
}

var (
	modelsOnce sync.Once
	modelsVal  *Models
	modelsErr  error
)

// testModels serves qwen3 and a LoRA adapter of it (loaded once).
func testModels(t testing.TB) *Models {
	dir := qwen3Dir(t)
	modelsOnce.Do(func() {
		modelsVal, modelsErr = LoadModels(ModelSpec{Served: []string{"qwen3=" + dir}, LoRAs: []string{"qwen3-lora=qwen3"}})
	})
	if modelsErr != nil {
		t.Fatal(modelsErr)
	}
	return modelsVal
}

type modelRig struct {
	s   *Server
	r   *actors.Router
	tok *tokenizer.Tokenizer
	url string
}

func startModelRig(t *testing.T, models *Models, maxPrompt int, workerURLs ...string) *modelRig {
	t.Helper()
	cfg := actors.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Shards = 2
	if maxPrompt > 0 {
		cfg.Limits.MaxPromptTokens = maxPrompt
	}
	r, err := actors.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	n := max(len(workerURLs), 2)
	for i := 1; i <= n; i++ {
		hb := &messages.WorkerHeartbeat{WorkerId: uint64(i), DataParallelSize: 1}
		if i <= len(workerURLs) {
			hb.Url = workerURLs[i-1]
		}
		if err := r.RegisterWorker(hb, true); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "workers registered", func() bool {
		reg, err := r.Registry(context.Background())
		return err == nil && len(reg.Workers) == n
	})
	s := New(Options{Router: r, Metrics: metrics.New(), MigrationLimit: 3, BlockSize: cfg.BlockSize, MaxBodyBytes: 1 << 20, Proxy: true,
		Models: models, Log: slog.New(slog.DiscardHandler), Client: http.DefaultClient, TrustRequestChatTemplate: true})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	rig := &modelRig{s: s, r: r, url: srv.URL}
	if models != nil && models.byName["qwen3"] != nil {
		rig.tok = models.byName["qwen3"].tok
	}
	return rig
}

func post(t testing.TB, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST %s: answer is not JSON: %q", url, raw)
	}
	return resp.StatusCode, out
}

const chatMessages = `[{"role":"system","content":"You are terse."},{"role":"user","content":"What is a KV cache? Explain in two sentences, with an example about prefix reuse across turns of a conversation."}]`

func TestRouteTextAndChat(t *testing.T) {
	g := startModelRig(t, testModels(t), 0)
	text := strings.Repeat("The router hashes every block of the prompt. ", 10)
	want := len(g.tok.Encode(text, true))
	code, out := post(t, g.url+"/route", fmt.Sprintf(`{"model":"qwen3","prompt":%q,"update_states":false}`, text))
	if code != 200 || out["prompt_tokens"] != float64(want) {
		t.Fatalf("text /route: %d %v, want prompt_tokens %d", code, out, want)
	}
	// One base model: model may be left out.
	if code, out = post(t, g.url+"/route", fmt.Sprintf(`{"prompt":[%q],"update_states":false}`, text)); code != 200 || out["prompt_tokens"] != float64(want) {
		t.Fatalf("text /route without model: %d %v", code, out)
	}
	chatIDs, _, err := g.tok.EncodeChat(tokenizer.Chat{Messages: json.RawMessage(chatMessages), AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	code, out = post(t, g.url+"/route", `{"model":"qwen3","update_states":false,"messages":`+chatMessages+`}`)
	if code != 200 || out["prompt_tokens"] != float64(len(chatIDs)) {
		t.Fatalf("chat /route: %d %v, want prompt_tokens %d", code, out, len(chatIDs))
	}
	for _, path := range []string{"/overlap_scores", "/potential_loads"} {
		code, out = post(t, g.url+path, `{"model":"qwen3","messages":`+chatMessages+`}`)
		if code != 200 || out["prompt_tokens"] != float64(len(chatIDs)) {
			t.Fatalf("chat %s: %d %v", path, code, out)
		}
	}
	// Token ids still need no tokenizer, and carry no prompt_tokens.
	if code, out = post(t, g.url+"/route", `{"token_ids":[1,2,3],"update_states":false}`); code != 200 || out["prompt_tokens"] != nil {
		t.Fatalf("token ids: %d %v", code, out)
	}
}

// The blocks a worker stored for a chat prompt are found again from the
// same messages, and not for a LoRA adapter of the model (Dynamo's salt).
func TestChatOverlapAndLoRA(t *testing.T) {
	g := startModelRig(t, testModels(t), 0)
	ids, _, err := g.tok.EncodeChat(tokenizer.Chat{Messages: json.RawMessage(chatMessages), AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	local := hashing.BlockHashes(ids, 16, hashing.Options{})
	seq := hashing.SequenceHashes(local)
	ev := &kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: 2}, Kind: kv.EventStored}
	for i := range local {
		ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(seq[i]), TokensHash: local[i]})
	}
	g.r.ApplyEvent(ev)
	blocks := func(model string) float64 {
		_, out := post(t, g.url+"/overlap_scores", `{"model":"`+model+`","messages":`+chatMessages+`}`)
		for _, row := range out["scores"].([]any) {
			r := row.(map[string]any)
			if r["worker_id"] == 2.0 {
				return r["device_blocks"].(float64)
			}
		}
		return 0
	}
	testutil.Eventually(t, 5*time.Second, "stored blocks indexed", func() bool { return blocks("qwen3") == float64(len(local)) })
	if b := blocks("qwen3-lora"); b != 0 {
		t.Fatalf("the LoRA adapter sees %v of the base model's blocks, want 0 (salted hashes)", b)
	}
	code, out := post(t, g.url+"/route", `{"model":"qwen3","messages":`+chatMessages+`,"update_states":false}`)
	if code != 200 || out["worker_id"] != 2.0 || out["cached_tokens"].(float64) < 16 {
		t.Fatalf("chat route: %d %v, want worker 2 with cached tokens", code, out)
	}
}

func TestTextErrors(t *testing.T) {
	g := startModelRig(t, testModels(t), 64)
	for _, tc := range []struct {
		name, path, body string
		code             int
		want             string
	}{
		{"unknown model", "/route", `{"model":"gpt-9","prompt":"hi"}`, 404, "not served here"},
		{"unknown model (proxy)", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, 404, "qwen3-lora"},
		{"messages not a list", "/route", `{"model":"qwen3","messages":{"role":"user"}}`, 400, "messages must be a list"},
		{"message without role", "/v1/chat/completions", `{"model":"qwen3","messages":[{"content":"hi"}]}`, 400, "messages[0].role"},
		{"template raises", "/route", `{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"chat_template":"{{ raise_exception('roles must alternate') }}"}`, 400, "roles must alternate"},
		{"template does not parse", "/route", `{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"chat_template":"{% if %}"}`, 400, "chat template error"},
		{"over max-prompt-tokens", "/route", fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, strings.Repeat("many words here ", 40)), 400, "max-prompt-tokens"},
		{"over max-prompt-tokens (proxy)", "/v1/completions", fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, strings.Repeat("many words here ", 40)), 400, "max-prompt-tokens"},
		{"invalid UTF-8", "/route", "{\"model\":\"qwen3\",\"prompt\":\"caf\xe9\"}", 400, "UTF-8"},
		{"invalid UTF-8 (chat)", "/v1/chat/completions", "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", 400, "UTF-8"},
		{"empty prompt", "/route", `{"model":"qwen3","prompt":""}`, 400, "empty"},
		{"chat without messages", "/v1/chat/completions", `{"model":"qwen3"}`, 400, "messages is required"},
		{"several prompts", "/v1/completions", `{"model":"qwen3","prompt":["a","b"]}`, 400, "one prompt"},
	} {
		code, out := post(t, g.url+tc.path, tc.body)
		if code != tc.code || !strings.Contains(fmt.Sprint(out["error"]), tc.want) {
			t.Errorf("%s: %d %v, want %d with %q", tc.name, code, out, tc.code, tc.want)
		}
	}
	_, out := post(t, g.url+"/route", `{"model":"gpt-9","prompt":"hi"}`)
	if models := fmt.Sprint(out["models"]); models != "[qwen3 qwen3-lora]" {
		t.Errorf("unknown model answer lists %s, want the served names", models)
	}
	// A request's own template is code: refused unless trusted.
	untrusted := New(Options{Router: g.r, BlockSize: 16, Models: testModels(t), Log: slog.New(slog.DiscardHandler)})
	if code, out := do(t, untrusted, "POST", "/route", `{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"chat_template":"x"}`); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "trust-request-chat-template") {
		t.Errorf("untrusted request template: %d %v", code, out)
	}
	// Without models, text is refused with a hint.
	plain := startModelRig(t, nil, 0)
	if code, out := post(t, plain.url+"/route", `{"prompt":"hi"}`); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "--tokenizer") {
		t.Errorf("no tokenizer: %d %v", code, out)
	}
}

// echoWorker records what the proxy forwarded and answers like an engine
// (streamed or whole).
type echoWorker struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []string
	paths  []string
	ranks  []string
}

func startEchoWorker(t *testing.T) *echoWorker {
	e := &echoWorker{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.bodies, e.paths = append(e.bodies, string(raw)), append(e.paths, r.URL.Path)
		e.ranks = append(e.ranks, r.Header.Get("X-data-parallel-rank"))
		e.mu.Unlock()
		if strings.Contains(string(raw), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < 3; i++ {
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":1}}`)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func TestProxyForwardsOriginalBody(t *testing.T) {
	w := startEchoWorker(t)
	g := startModelRig(t, testModels(t), 0, w.srv.URL)
	bodies := []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"qwen3","messages":` + chatMessages + `,"max_tokens":3}`},
		{"/v1/chat/completions", `{"model":"qwen3-lora", "stream":true, "messages":` + chatMessages + `}`},
		{"/v1/completions", `{"model":"qwen3","prompt":"Once upon a time","max_tokens":3,"stream":true}`},
		{"/v1/completions", `{"prompt":[1,2,3,4],"max_tokens":3}`},
	}
	for _, b := range bodies {
		resp, err := http.Post(g.url+b.path, "application/json", strings.NewReader(b.body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(raw), "choices") {
			t.Fatalf("%s: %d %q", b.path, resp.StatusCode, raw)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.bodies) != len(bodies) {
		t.Fatalf("worker saw %d requests, want %d", len(w.bodies), len(bodies))
	}
	for i, b := range bodies {
		if w.bodies[i] != b.body || w.paths[i] != b.path || w.ranks[i] != "0" {
			t.Errorf("request %d: worker got %s %q (X-data-parallel-rank %q), want %s %q unchanged (rank 0)", i, w.paths[i], w.bodies[i], w.ranks[i], b.path, b.body)
		}
	}
	// Nothing stays in the load view.
	testutil.Eventually(t, 5*time.Second, "requests freed", func() bool {
		_, out := post(t, g.url+"/potential_loads", `{"token_ids":[1,2,3]}`)
		for _, row := range out["loads"].([]any) {
			if row.(map[string]any)["active_requests"].(float64) != 0 {
				return false
			}
		}
		return true
	})
	resp, err := http.Get(g.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) != 2 || list.Data[0].ID != "qwen3" ||
		list.Data[1].ID != "qwen3-lora" || list.Data[1].Parent == nil || *list.Data[1].Parent != "qwen3" {
		t.Fatalf("/v1/models: %+v %v", list, err)
	}
}

// --tokenizer-mode engine: /tokenize on a worker, cached per identical
// input; a failing worker is a 502, none registered a 503.
func TestEngineTokenizer(t *testing.T) {
	var calls atomic.Int64
	var fail atomic.Bool
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" {
			http.NotFound(w, r)
			return
		}
		calls.Add(1)
		var in map[string]any
		_ = json.NewDecoder(r.Body).Decode(&in)
		if fail.Load() {
			http.Error(w, "engine down", 500)
			return
		}
		if in["messages"] == nil && in["prompt"] == nil {
			w.WriteHeader(400)
			fmt.Fprint(w, `{"error":"prompt or messages"}`)
			return
		}
		fmt.Fprint(w, `{"count":20,"max_model_len":4096,"tokens":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}`)
	}))
	defer eng.Close()
	models, err := LoadModels(ModelSpec{Served: []string{"m"}, Engine: true})
	if err != nil {
		t.Fatal(err)
	}
	g := startModelRig(t, models, 0, eng.URL)
	for i := 0; i < 2; i++ {
		code, out := post(t, g.url+"/route", `{"model":"m","messages":[{"role":"user","content":"hi"}],"update_states":false}`)
		if code != 200 || out["prompt_tokens"] != 20.0 {
			t.Fatalf("engine-tokenized route: %d %v", code, out)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("/tokenize called %d times for two identical requests, want 1 (cached)", calls.Load())
	}
	fail.Store(true)
	if code, out := post(t, g.url+"/route", `{"model":"m","prompt":"other text"}`); code != http.StatusBadGateway {
		t.Fatalf("failing engine: %d %v, want 502", code, out)
	}
	none := startModelRig(t, models, 0)
	if code, out := post(t, none.url+"/route", `{"model":"m","prompt":"yet other"}`); code != http.StatusServiceUnavailable {
		t.Fatalf("no worker URL: %d %v, want 503", code, out)
	}
}
