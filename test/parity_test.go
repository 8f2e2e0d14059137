package test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/tokenizer"
)

type parityAnswer struct {
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// modelTokenization reads a model's tokenization from /v1/models.
func modelTokenization(t *testing.T, base, model string) string {
	t.Helper()
	code, body := Get(t, base+"/v1/models")
	var list struct {
		Data []struct {
			ID           string `json:"id"`
			Tokenization string `json:"kvrouter_tokenization"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil {
		t.Fatalf("/v1/models: %d %s", code, body)
	}
	for _, m := range list.Data {
		if m.ID == model {
			return m.Tokenization
		}
	}
	t.Fatalf("/v1/models has no %s: %s", model, body)
	return ""
}

// TestLiveParitySwitch: a fleet whose engines render one model's chat
// template with an extra token (a doubled BOS) that the router's template
// does not have. Every block hash the router computes for that model
// misses the index, so routing ignores the cache. The parity tracker sees
// the engines' prompt_tokens differ, switches the model to engine
// tokenization, and from then on the router's hashes are the engines'.
// Measured in one run: requests until the first mismatch is seen, until
// the switch, and the engines' own cache hit rate (cached_tokens /
// prompt_tokens from usage) before and after. A second model served from
// the same tokenizer, without the skew, stays on router tokenization.
func TestLiveParitySwitch(t *testing.T) {
	tokDir := needNPM(t, "tokenizers/qwen3")
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	const window = 24
	rep := StartReplica(t, func(c *config.Config) {
		c.ServedModels = []string{"qwen3=" + tokDir, "twin=" + tokDir}
		c.ParityWindow, c.ParityMinSamples, c.ParityMismatchThreshold, c.ParityCleanWindow = window, window, 0.2, 0
	})
	base := BaseURL(rep)
	const nWorkers = 4
	for i := 1; i <= nWorkers; i++ {
		StartMockWorker(t, rep, uint64(i), func(c *mockengine.ServerConfig) {
			c.Tokenizer = tok
			c.Engine.Speedup = 100
			c.Engine.TemplateSkew = map[string]int{"qwen3": 1}
			// Room for about three documents per engine: two are its own
			// when routing follows the cache, not all eight when it does not.
			c.Engine.TotalKVBlocks = 100
		})
	}
	testutil.Eventually(t, 10*time.Second, "mock workers registered", func() bool { return len(workers(t, base).Workers) == nWorkers })

	// Eight long documents, each asked about again and again: a router
	// that sees the cache sends a document's questions where the
	// document already is.
	rng := rand.New(rand.NewPCG(7, 30))
	words := strings.Fields("cache block prefix token engine router worker rank hash event index score load queue batch prompt reply model layer tensor")
	doc := func(i int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "Document %d. ", i)
		for range 450 {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		return b.String()
	}
	docs := make([]string, 8)
	for i := range docs {
		docs[i] = doc(i)
	}
	twinDoc := doc(99)
	type sample struct{ prompt, cached int }
	var before, after []sample
	var beforeWarm, afterWarm []sample
	seen := map[int]bool{}
	firstMismatch, switchedAt := 0, 0
	const total = 100
	for i := 1; i <= total; i++ {
		d := rng.IntN(len(docs))
		msgs, _ := json.Marshal([]map[string]string{
			{"role": "system", "content": docs[d]},
			{"role": "user", "content": fmt.Sprintf("Question %d: what does the document say about %s?", i, words[rng.IntN(len(words))])},
		})
		body := fmt.Sprintf(`{"model":"qwen3","max_tokens":2,"messages":%s}`, msgs)
		stream := i%3 == 0
		var ans parityAnswer
		if stream {
			ans = streamUsage(t, base, fmt.Sprintf(`{"model":"qwen3","max_tokens":2,"stream":true,"stream_options":{"include_usage":true},"messages":%s}`, msgs))
		} else if code := Post(t, base+"/v1/chat/completions", body, &ans); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
		if ans.Usage == nil || ans.Usage.PromptTokensDetails == nil {
			t.Fatalf("request %d: no usage with cached tokens", i)
		}
		s := sample{ans.Usage.PromptTokens, ans.Usage.PromptTokensDetails.CachedTokens}
		if switchedAt == 0 {
			before = append(before, s)
			if seen[d] {
				beforeWarm = append(beforeWarm, s)
			}
		} else {
			after = append(after, s)
			if seen[d] {
				afterWarm = append(afterWarm, s)
			}
		}
		seen[d] = true
		if firstMismatch == 0 && metricValue(t, base, `kvrouter_parity_token_mismatch_total{model="qwen3"}`) > 0 {
			firstMismatch = i
		}
		if switchedAt == 0 && modelTokenization(t, base, "qwen3") == "engine" {
			switchedAt = i
		}
		if i%4 == 0 {
			// The control model: same tokenizer, no skew.
			tmsgs, _ := json.Marshal([]map[string]string{{"role": "system", "content": twinDoc}, {"role": "user", "content": fmt.Sprintf("twin %d", i)}})
			if code := Post(t, base+"/v1/chat/completions", fmt.Sprintf(`{"model":"twin","max_tokens":2,"messages":%s}`, tmsgs), nil); code != 200 {
				t.Fatalf("twin request %d: %d", i, code)
			}
		}
		time.Sleep(15 * time.Millisecond) // the engine's KV events reach the index
	}
	rate := func(ss []sample) float64 {
		var p, c int
		for _, s := range ss {
			p += s.prompt
			c += s.cached
		}
		if p == 0 {
			return 0
		}
		return float64(c) / float64(p)
	}
	_, status := Get(t, base+"/parity")
	t.Logf("parity: first mismatch seen at request %d, switched to engine tokenization at request %d (window %d, threshold 0.2)", firstMismatch, switchedAt, window)
	t.Logf("engine cache hit rate (cached_tokens / prompt_tokens): before the switch %.3f over %d requests (%.3f over %d repeats of a document), after %.3f over %d requests (%.3f over %d repeats)",
		rate(before), len(before), rate(beforeWarm), len(beforeWarm), rate(after), len(after), rate(afterWarm), len(afterWarm))
	t.Logf("GET /parity: %s", status)
	if firstMismatch != 1 {
		t.Fatalf("first mismatch at request %d, want 1", firstMismatch)
	}
	if switchedAt == 0 || switchedAt > window+1 {
		t.Fatalf("switched at request %d, want by request %d", switchedAt, window+1)
	}
	if len(after) < 40 || rate(after) <= rate(before) || rate(afterWarm) <= rate(beforeWarm) {
		t.Fatalf("hit rate after the switch (%.3f, warm %.3f) is not higher than before (%.3f, warm %.3f)", rate(after), rate(afterWarm), rate(before), rate(beforeWarm))
	}
	if m := modelTokenization(t, base, "twin"); m != "router" {
		t.Fatalf("the control model was switched: %s", m)
	}
	if n := metricValue(t, base, `kvrouter_parity_token_mismatch_total{model="twin"}`); n != 0 {
		t.Fatalf("control model mismatches: %v", n)
	}
}

// streamUsage posts a streamed request and returns its usage chunk.
func streamUsage(t *testing.T, base, body string) parityAnswer {
	t.Helper()
	code, raw := postRaw(t, base+"/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("stream: %d %s", code, raw)
	}
	var out parityAnswer
	for _, line := range strings.Split(raw, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk parityAnswer
		if json.Unmarshal([]byte(data), &chunk) == nil && chunk.Usage != nil {
			out = chunk
		}
	}
	return out
}

func postRaw(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp.StatusCode, string(raw)
}
