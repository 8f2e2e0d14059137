package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench"
	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// npmCache is where `make node-deps` unpacks the npm packages.
func npmCache() string {
	if d := os.Getenv("KVROUTER_NPM_CACHE"); d != "" {
		return d
	}
	return filepath.Join("..", ".cache", "npm")
}

// needNPM returns the path of a fetched npm file, or fails (skips when
// KVROUTER_OFFLINE is set).
func needNPM(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(npmCache(), rel))
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		if os.Getenv("KVROUTER_OFFLINE") != "" {
			t.Skipf("%s is not fetched (%v) and KVROUTER_OFFLINE is set: skipping", rel, err)
		}
		t.Fatalf("%s is not fetched (%v): run `make node-deps` (or set KVROUTER_OFFLINE=1 to skip)", rel, err)
	}
	return p
}

type clientTurn struct {
	Worker  string `json:"worker"`
	Content string `json:"content"`
	Chunks  int    `json:"chunks"`
	Usage   *struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

type clientConversation struct {
	First  clientTurn `json:"first"`
	Second clientTurn `json:"second"`
	View   struct {
		WorkerID     uint64 `json:"worker_id"`
		CachedTokens uint64 `json:"cached_tokens"`
		PromptTokens int    `json:"prompt_tokens"`
	} `json:"view"`
}

// TestOpenAIClientMultiTurnChat drives the router's proxy with the
// official `openai` npm client (node): two conversations of two turns,
// streamed and not, over four mock workers that tokenize with the same
// Qwen3 tokenizer and chat template. The second turn of each must land on
// the worker holding the first turn's blocks: the router sees cached
// tokens for it before it is sent, and the engine reports them after.
func TestOpenAIClientMultiTurnChat(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("KVROUTER_OFFLINE") != "" {
			t.Skip("node is not installed and KVROUTER_OFFLINE is set: skipping")
		}
		t.Fatal("node is not installed: run `make node-deps`")
	}
	modules := needNPM(t, "node_modules")
	needNPM(t, "node_modules/openai/package.json")
	tokDir := needNPM(t, "tokenizers/qwen3")
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	rep := StartReplica(t, func(c *config.Config) { c.ServedModels = []string{"qwen3=" + tokDir} })
	base := BaseURL(rep)
	const n = 4
	for i := 1; i <= n; i++ {
		StartMockWorker(t, rep, uint64(i), func(c *mockengine.ServerConfig) {
			c.Tokenizer = tok
			c.Engine.ModelName = "w" + strconv.Itoa(i) // the answers name the worker that served them
			c.Engine.Speedup = 100
		})
	}
	testutil.Eventually(t, 10*time.Second, "mock workers registered", func() bool { return len(workers(t, base).Workers) == n })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "openai_chat.js"), base, "qwen3")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("openai client: %v\n%s", err, stderr.String())
	}
	// Two lines: a stream without stream_options, then the conversations.
	lines := strings.SplitN(strings.TrimSpace(stdout.String()), "\n", 2)
	var out map[string]clientConversation
	var plain clientTurn
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &plain) != nil || json.Unmarshal([]byte(lines[1]), &out) != nil {
		t.Fatalf("client output %q: want two JSON lines", stdout.String())
	}
	// The proxy asked the engine for usage on this stream; the client,
	// which did not, must not see it.
	if plain.Usage != nil || plain.Content == "" || plain.Chunks != 6 {
		t.Errorf("stream without stream_options: %+v, want 6 chunks of content and no usage", plain)
	}
	for name, c := range out {
		t.Logf("conversation %s: first turn on %s, second on %s; router saw %d cached of %d prompt tokens on worker %d; engine reported %+v",
			name, c.First.Worker, c.Second.Worker, c.View.CachedTokens, c.View.PromptTokens, c.View.WorkerID, c.Second.Usage)
		holder := fmt.Sprintf("w%d", c.View.WorkerID)
		if c.First.Worker == "" || c.First.Content == "" || c.Second.Content == "" {
			t.Errorf("%s: empty answers: %+v", name, c)
		}
		if c.View.CachedTokens == 0 || holder != c.First.Worker {
			t.Errorf("%s: the router's view of the second turn is worker %s with %d cached tokens; the first turn ran on %s", name, holder, c.View.CachedTokens, c.First.Worker)
		}
		if c.Second.Worker != c.First.Worker {
			t.Errorf("%s: the second turn ran on %s, not on %s which holds the first turn's blocks", name, c.Second.Worker, c.First.Worker)
		}
		if c.Second.Usage == nil || c.Second.Usage.PromptTokensDetails.CachedTokens == 0 {
			t.Errorf("%s: the engine reports no cached tokens for the second turn: %+v", name, c.Second.Usage)
		} else if c.Second.Usage.PromptTokens != c.View.PromptTokens {
			t.Errorf("%s: the router tokenized the second turn into %d tokens, the engine into %d", name, c.View.PromptTokens, c.Second.Usage.PromptTokens)
		}
	}
	if !strings.Contains(stdout.String(), `"chunks":`) {
		t.Errorf("no streamed turn in %s", stdout.String())
	}
	testutil.Eventually(t, 5*time.Second, "requests freed", func() bool { return activeRequests(t, base) == 0 })
}

// TestChatWorkloadThroughProxy runs kvbench's chat workload (multi-turn
// conversations sent as messages) through a replica serving Qwen3 to
// mock workers that tokenize the same way: nothing fails, and later turns
// hit the cache their earlier turns filled.
func TestChatWorkloadThroughProxy(t *testing.T) {
	base := startQwen3Fleet(t, 3)
	w := bench.WorkloadOptions{Kind: bench.WorkloadChat, Requests: 36, Seed: 3,
		Chat: bench.ChatConfig{Conversations: 6, Turns: 6, SystemWords: 200, UserWords: 40, ReplyWords: 30, OutputTokens: 4}}
	schedule, points, err := w.Build([]float64{40})
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := schedule(points[0])
	if err != nil {
		t.Fatal(err)
	}
	res := bench.RunLoad(context.Background(), base, reqs, points[0], bench.LoadOptions{Model: "qwen3", Timeout: 30 * time.Second})
	t.Logf("chat workload: %d requests, %d failed, hit rate %.3f, TTFT p50 %.1f ms", res.Requests, res.Errors, res.HitRate, res.TTFTP50)
	if res.Errors > 0 || res.Requests != 36 {
		t.Fatalf("chat workload: %d of %d failed (first: %s)", res.Errors, res.Requests, res.FirstErr)
	}
	if res.HitRate < 0.3 {
		t.Fatalf("chat workload hit rate %.3f: later turns should reuse earlier turns' blocks", res.HitRate)
	}
}

// TestEngineTokenizerMode: with --tokenizer-mode engine the router asks a
// worker's POST /tokenize (the mock speaks vLLM's API) and routes on the
// tokens the engine computes.
func TestEngineTokenizerMode(t *testing.T) {
	tokDir := needNPM(t, "tokenizers/qwen3")
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	rep := StartReplica(t, func(c *config.Config) {
		c.ServedModels = []string{"qwen3"}
		c.TokenizerMode = "engine"
	})
	base := BaseURL(rep)
	for i := 1; i <= 2; i++ {
		StartMockWorker(t, rep, uint64(i), func(c *mockengine.ServerConfig) { c.Tokenizer = tok; c.Engine.Speedup = 100 })
	}
	testutil.Eventually(t, 10*time.Second, "mock workers registered", func() bool { return len(workers(t, base).Workers) == 2 })
	msgs := `[{"role":"user","content":"How do engines report cached tokens?"}]`
	ids, _, err := tok.EncodeChat(tokenizer.Chat{Messages: json.RawMessage(msgs), AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		PromptTokens int `json:"prompt_tokens"`
	}
	if code := Post(t, base+"/route", `{"model":"qwen3","update_states":false,"messages":`+msgs+`}`, &out); code != 200 || out.PromptTokens != len(ids) {
		t.Fatalf("engine-tokenized route: %d, prompt_tokens %d, want %d", code, out.PromptTokens, len(ids))
	}
	var errOut map[string]any
	if code := Post(t, base+"/route", `{"model":"qwen3","messages":[{"role":"user","content":[5]}]}`, &errOut); code != 400 {
		t.Fatalf("messages the engine refuses: %d %v, want 400", code, errOut)
	}
}

// startQwen3Fleet starts a replica serving Qwen3 (the npm tokenizer) and n
// mock workers that tokenize and render the same way, and returns the
// replica's base URL once every worker is registered.
func startQwen3Fleet(t *testing.T, n int) string {
	t.Helper()
	tokDir := needNPM(t, "tokenizers/qwen3")
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	rep := StartReplica(t, func(c *config.Config) { c.ServedModels = []string{"qwen3=" + tokDir} })
	base := BaseURL(rep)
	for i := 1; i <= n; i++ {
		StartMockWorker(t, rep, uint64(i), func(c *mockengine.ServerConfig) { c.Tokenizer = tok; c.Engine.Speedup = 100 })
	}
	testutil.Eventually(t, 10*time.Second, "mock workers registered", func() bool { return len(workers(t, base).Workers) == n })
	return base
}
