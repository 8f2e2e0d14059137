package mockengine

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/tokenizer"
)

func qwen3(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	dir := os.Getenv("KVROUTER_NPM_CACHE")
	if dir == "" {
		dir = filepath.Join("..", ".cache", "npm")
	}
	dir = filepath.Join(dir, "tokenizers", "qwen3")
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("KVROUTER_OFFLINE") != "" {
			t.Skipf("the Qwen3 tokenizer is not fetched (%v) and KVROUTER_OFFLINE is set: skipping", err)
		}
		t.Fatalf("the Qwen3 tokenizer is not fetched (%v): run `make node-deps` (or set KVROUTER_OFFLINE=1 to skip)", err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// postPath posts body to a full URL.
func postPath(t *testing.T, url, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

const testMessages = `[{"role":"user","content":"Tell me about prefix caching in LLM serving, in a few sentences, please."}]`

// With a tokenizer the mock takes chat messages and text, computes the
// tokens the template and tokenizer give (KV events of exactly those),
// and answers in OpenAI's chat shapes.
func TestChatAndTextPrompts(t *testing.T) {
	tok := qwen3(t)
	pub := &fakePublisher{}
	w := startWorker(t, func(c *ServerConfig) { c.Tokenizer = tok }, pub)
	ids, _, err := tok.EncodeChat(tokenizer.Chat{Messages: json.RawMessage(testMessages), AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct{ Role, Content string } `json:"message"`
		} `json:"choices"`
		Usage completionUsage `json:"usage"`
	}
	r := postPath(t, w.url+"/v1/chat/completions", `{"model":"m","max_tokens":3,"messages":`+testMessages+`}`, nil)
	if err := json.NewDecoder(r.Body).Decode(&resp); err != nil || r.StatusCode != 200 {
		t.Fatalf("chat: %d %v", r.StatusCode, err)
	}
	r.Body.Close()
	if resp.Object != "chat.completion" || resp.Choices[0].Message.Role != "assistant" || resp.Usage.PromptTokens != len(ids) || resp.Usage.CompletionTokens != 3 {
		t.Fatalf("chat answer %+v, want %d prompt tokens", resp, len(ids))
	}
	// The published blocks are the hashes of the template's tokens.
	want := hashing.BlockHashes(ids, 16, hashing.Options{})
	testutil.Eventually(t, 5*time.Second, "stored events", func() bool {
		evs, _ := pub.snapshot()
		var got []kv.LocalBlockHash
		for _, ev := range evs {
			for _, b := range ev.Blocks {
				got = append(got, b.TokensHash)
			}
		}
		return len(got) >= len(want) && got[0] == want[0] && got[len(want)-1] == want[len(want)-1]
	})
	// Streamed, with usage: the same prompt is now cached.
	r = postPath(t, w.url+"/v1/chat/completions", `{"model":"m","max_tokens":2,"stream":true,"stream_options":{"include_usage":true},"messages":`+testMessages+`}`, map[string]string{"X-data-parallel-rank": "0"})
	raw, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(raw), `"object":"chat.completion.chunk"`) || !strings.Contains(string(raw), `"role":"assistant"`) ||
		!strings.HasSuffix(string(raw), "data: [DONE]\n\n") || !strings.Contains(string(raw), `"cached_tokens":`) || strings.Contains(string(raw), `"cached_tokens":0`) {
		t.Fatalf("streamed chat: %s", raw)
	}
	// /tokenize (vLLM's API) and a text completion agree with the tokenizer.
	r = postPath(t, w.url+"/tokenize", `{"model":"m","messages":`+testMessages+`}`, nil)
	var tk struct {
		Count  int      `json:"count"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&tk); err != nil || tk.Count != len(ids) {
		t.Fatalf("/tokenize: %+v %v", tk, err)
	}
	r.Body.Close()
	r = postPath(t, w.url+"/v1/completions", `{"model":"m","prompt":"Hello there","max_tokens":1}`, nil)
	var c completionResponse
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil || c.Usage.PromptTokens != len(tok.Encode("Hello there", true)) {
		t.Fatalf("text completion: %+v %v", c, err)
	}
	r.Body.Close()
	// Broken messages are a 400.
	r = postPath(t, w.url+"/v1/chat/completions", `{"model":"m","messages":[{"content":"x"}]}`, nil)
	r.Body.Close()
	if r.StatusCode != http.StatusBadRequest {
		t.Fatalf("messages without role: %d", r.StatusCode)
	}
}

// TestTemplateSkew: a model with a template skew gets extra copies of its
// first token in chat prompts (/tokenize and usage alike); other models
// do not.
func TestTemplateSkew(t *testing.T) {
	tok := qwen3(t)
	w := startWorker(t, func(c *ServerConfig) { c.Tokenizer = tok; c.Engine.TemplateSkew = map[string]int{"skewed": 2} }, &fakePublisher{})
	count := func(model string) (tokenize, usage int) {
		var tk struct {
			Count  int      `json:"count"`
			Tokens []uint32 `json:"tokens"`
		}
		r := postPath(t, w.url+"/tokenize", `{"model":"`+model+`","messages":`+testMessages+`}`, nil)
		if err := json.NewDecoder(r.Body).Decode(&tk); err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if model == "skewed" && (len(tk.Tokens) < 3 || tk.Tokens[0] != tk.Tokens[1] || tk.Tokens[1] != tk.Tokens[2]) {
			t.Fatalf("skewed prompt does not start with copies of its first token: %v", tk.Tokens[:3])
		}
		var resp struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		r = postPath(t, w.url+"/v1/chat/completions", `{"model":"`+model+`","max_tokens":1,"messages":`+testMessages+`}`, nil)
		if err := json.NewDecoder(r.Body).Decode(&resp); err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return tk.Count, resp.Usage.PromptTokens
	}
	plainTok, plainUsage := count("plain")
	skewTok, skewUsage := count("skewed")
	if plainTok != plainUsage || skewTok != skewUsage || skewTok != plainTok+2 {
		t.Fatalf("plain %d/%d, skewed %d/%d: want the skewed model 2 tokens longer in both", plainTok, plainUsage, skewTok, skewUsage)
	}
	bad := DefaultConfig()
	bad.TemplateSkew = map[string]int{"m": MaxTemplateSkew + 1}
	if bad.Validate() == nil {
		t.Fatal("an out-of-range skew was accepted")
	}
}
