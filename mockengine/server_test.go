package mockengine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
)

// fakePublisher records what a worker publishes.
type fakePublisher struct {
	mu         sync.Mutex
	events     []kv.Event
	heartbeats []Heartbeat
}

func (p *fakePublisher) PublishEvent(_ context.Context, ev *kv.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, *ev)
	return nil
}

func (p *fakePublisher) PublishHeartbeat(_ context.Context, hb Heartbeat) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heartbeats = append(p.heartbeats, hb)
	return nil
}

func (p *fakePublisher) snapshot() ([]kv.Event, []Heartbeat) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events), slices.Clone(p.heartbeats)
}

// testWorker is a mock worker served on loopback for one test.
type testWorker struct {
	srv  *Server
	url  string
	stop func() // shuts the worker down and waits for Serve to return
}

func startWorker(t *testing.T, mutate func(*ServerConfig), pub Publisher) *testWorker {
	t.Helper()
	cfg := DefaultServerConfig()
	cfg.Engine.WorkerID = 42
	cfg.Engine.Speedup = 100
	cfg.HeartbeatInterval = 20 * time.Millisecond
	cfg.ShutdownGrace = 100 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := NewServer(cfg, pub)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &testWorker{srv: srv, url: "http://" + ln.Addr().String(), stop: stop}
}

func post(t *testing.T, ctx context.Context, url, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(body))
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

func promptJSON(tokens []uint32) string {
	b, _ := json.Marshal(tokens)
	return string(b)
}

// complete sends a non-streamed completion and returns the decoded body.
func complete(t *testing.T, url string, prompt []uint32, maxTokens int, extra string, header map[string]string) completionResponse {
	t.Helper()
	body := fmt.Sprintf(`{"model":"m","prompt":%s,"max_tokens":%d%s}`, promptJSON(prompt), maxTokens, extra)
	resp := post(t, context.Background(), url, body, header)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var out completionResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return out
}

func TestStreamedCompletionIsServerSentEvents(t *testing.T) {
	w := startWorker(t, nil, nil)
	prompt := seqTokens(10, 50)
	resp := post(t, context.Background(), w.url,
		fmt.Sprintf(`{"prompt":%s,"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`, promptJSON(prompt)), nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	events := strings.Split(string(raw), "\n\n")
	if events[len(events)-1] != "" {
		t.Fatalf("stream must end with a blank line: %q", raw)
	}
	events = events[:len(events)-1]
	if len(events) != 7 || events[6] != "data: [DONE]" {
		t.Fatalf("want 5 tokens, usage, [DONE]; got %q", events)
	}
	want := GeneratedTokens(prompt, 5)
	for i, ev := range events[:6] {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			t.Fatalf("event %d is not a data line: %q", i, ev)
		}
		var chunk completionResponse
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if chunk.Object != "text_completion" || !strings.HasPrefix(chunk.ID, "cmpl-") {
			t.Fatalf("event %d header: %+v", i, chunk)
		}
		if i == 5 {
			u := chunk.Usage
			if len(chunk.Choices) != 0 || u == nil || u.PromptTokens != 50 || u.CompletionTokens != 5 || u.TotalTokens != 55 {
				t.Fatalf("usage chunk: %s", data)
			}
			continue
		}
		c := chunk.Choices[0]
		if !slices.Equal(c.TokenIDs, want[i:i+1]) || c.Text != tokenText(want[i]) {
			t.Fatalf("token %d: %+v, want %d", i, c, want[i])
		}
		if last := i == 4; (c.FinishReason != nil) != last || (last && *c.FinishReason != "length") {
			t.Fatalf("token %d finish reason %v", i, c.FinishReason)
		}
	}
}

func TestNonStreamedCompletionReportsCachedTokens(t *testing.T) {
	w := startWorker(t, nil, nil)
	prompt := seqTokens(7, 100) // 6 full blocks of 16
	first := complete(t, w.url, prompt, 3, "", nil)
	if len(first.Choices) != 1 || !slices.Equal(first.Choices[0].TokenIDs, GeneratedTokens(prompt, 3)) {
		t.Fatalf("choices %+v", first.Choices)
	}
	if u := first.Usage; u.PromptTokens != 100 || u.CompletionTokens != 3 || u.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first usage %+v", u)
	}
	second := complete(t, w.url, prompt, 3, "", nil)
	if got := second.Usage.PromptTokensDetails.CachedTokens; got != 96 {
		t.Fatalf("second request cached %d tokens, want 96", got)
	}
}

func TestGarbageIsRejectedWith400(t *testing.T) {
	w := startWorker(t, func(c *ServerConfig) { c.Engine.DPSize = 2; c.Engine.TotalKVBlocks = 8 }, nil)
	tests := []struct {
		name, body string
		header     map[string]string
	}{
		{"not json", `{{{`, nil},
		{"text prompt", `{"prompt":"hello"}`, nil},
		{"missing prompt", `{"max_tokens":3}`, nil},
		{"empty prompt", `{"prompt":[]}`, nil},
		{"negative token", `{"prompt":[-1]}`, nil},
		{"fractional token", `{"prompt":[1.5]}`, nil},
		{"two prompts", `{"prompt":[[1],[2]]}`, nil},
		{"zero max tokens", `{"prompt":[1],"max_tokens":0}`, nil},
		{"rank out of range", `{"prompt":[1],"dp_rank":2}`, nil},
		{"negative rank", `{"prompt":[1],"dp_rank":-1}`, nil},
		{"bad rank header", `{"prompt":[1]}`, map[string]string{"X-Dp-Rank": "one"}},
		{"too large for cache", `{"prompt":[1],"max_tokens":1000}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, context.Background(), w.url, tt.body, tt.header)
			defer resp.Body.Close()
			var body struct {
				Error struct {
					Message string `json:"message"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("error body is not JSON: %v", err)
			}
			if resp.StatusCode != http.StatusBadRequest || body.Error.Message == "" || body.Error.Code != 400 {
				t.Fatalf("status %d body %+v", resp.StatusCode, body)
			}
		})
	}
}

func TestNestedPromptIsAccepted(t *testing.T) {
	w := startWorker(t, nil, nil)
	resp := post(t, context.Background(), w.url, `{"prompt":[[5,6,7]],"max_tokens":2}`, nil)
	defer resp.Body.Close()
	var out completionResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d err %v", resp.StatusCode, err)
	}
	if !slices.Equal(out.Choices[0].TokenIDs, GeneratedTokens([]uint32{5, 6, 7}, 2)) {
		t.Fatalf("tokens %v", out.Choices[0].TokenIDs)
	}
}

func TestClientDisconnectFreesBlocks(t *testing.T) {
	w := startWorker(t, func(c *ServerConfig) { c.Engine.Speedup = 1 }, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := post(t, ctx, w.url, fmt.Sprintf(`{"prompt":%s,"max_tokens":5000,"stream":true}`, promptJSON(seqTokens(1, 64))), nil)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first line %q: %v", line, err)
	}
	if st := w.srv.Engine().Stats()[0]; st.Running != 1 || st.UsedBlocks == 0 {
		t.Fatalf("request should be running with blocks: %+v", st)
	}
	cancel()
	resp.Body.Close()
	testutil.Eventually(t, 5*time.Second, "blocks to be freed", func() bool {
		st := w.srv.Engine().Stats()[0]
		return st.Running == 0 && st.Waiting == 0 && st.UsedBlocks == 0
	})
}

func TestDpRanksHaveIndependentCachesAndEventStreams(t *testing.T) {
	pub := &fakePublisher{}
	w := startWorker(t, func(c *ServerConfig) { c.Engine.DPSize = 2 }, pub)
	prompt := seqTokens(300, 64)
	if got := complete(t, w.url, prompt, 1, `,"dp_rank":0`, nil).Usage.PromptTokensDetails.CachedTokens; got != 0 {
		t.Fatalf("rank 0 cold: cached %d", got)
	}
	if got := complete(t, w.url, prompt, 1, "", map[string]string{"X-Dp-Rank": "1"}).Usage.PromptTokensDetails.CachedTokens; got != 0 {
		t.Fatalf("rank 1 must not see rank 0's cache: cached %d", got)
	}
	if got := complete(t, w.url, prompt, 1, `,"dp_rank":0`, nil).Usage.PromptTokensDetails.CachedTokens; got != 48 {
		t.Fatalf("rank 0 warm: cached %d, want 48", got)
	}
	testutil.Eventually(t, 5*time.Second, "one stored event per rank", func() bool {
		evs, _ := pub.snapshot()
		return len(evs) >= 2
	})
	evs, _ := pub.snapshot()
	for _, ev := range evs {
		if ev.Kind != kv.EventStored || ev.EventID != 0 || ev.Worker.WorkerID != 42 || len(ev.Blocks) != 4 {
			t.Fatalf("want one stored event of 4 blocks with id 0 on each rank, got %+v", evs)
		}
	}
	if evs[0].Worker.DpRank == evs[1].Worker.DpRank {
		t.Fatalf("both events from rank %d", evs[0].Worker.DpRank)
	}
	st := w.srv.Engine().Stats()
	if st[0].PrefixHits != 48 || st[1].PrefixHits != 0 {
		t.Fatalf("prefix hits per rank: %d, %d", st[0].PrefixHits, st[1].PrefixHits)
	}
}

func TestMissingRankPicksLeastLoaded(t *testing.T) {
	w := startWorker(t, func(c *ServerConfig) { c.Engine.DPSize = 3; c.Engine.Speedup = 1 }, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := fmt.Sprintf(`{"prompt":[1,2,3],"max_tokens":5000,"stream":true,"dp_rank":%d}`, 0)
	resp := post(t, ctx, w.url, long, nil)
	defer resp.Body.Close()
	testutil.Eventually(t, 5*time.Second, "rank 0 busy", func() bool { return w.srv.Engine().Stats()[0].Running == 1 })
	out := post(t, context.Background(), w.url, `{"prompt":[9],"max_tokens":1}`, nil)
	out.Body.Close()
	if got := out.Header.Get("X-Dp-Rank"); got != "1" {
		t.Fatalf("least loaded rank: got %q, want 1", got)
	}
}

func TestMetricsUseVLLMNames(t *testing.T) {
	w := startWorker(t, nil, nil)
	complete(t, w.url, seqTokens(1, 40), 2, "", nil)
	resp, err := http.Get(w.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, name := range []string{
		`vllm:num_requests_running{engine="0",model_name="mock-model"} 0`,
		`vllm:num_requests_waiting{engine="0",model_name="mock-model"} 0`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="mock-model"} 0`,
		`vllm:prefix_cache_hits_total{engine="0",model_name="mock-model"} 0`,
		`vllm:prefix_cache_queries_total{engine="0",model_name="mock-model"} 40`,
		`vllm:generation_tokens_total{engine="0",model_name="mock-model"} 2`,
		`vllm:time_to_first_token_seconds_count{model_name="mock-model"} 1`,
	} {
		if !bytes.Contains(raw, []byte(name)) {
			t.Errorf("metrics lack %q", name)
		}
	}
}

func TestHealthAndHeartbeatsAndShutdownClears(t *testing.T) {
	pub := &fakePublisher{}
	w := startWorker(t, func(c *ServerConfig) { c.Engine.DPSize = 2 }, pub)
	resp, err := http.Get(w.url + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	testutil.Eventually(t, 5*time.Second, "two heartbeats", func() bool {
		_, hbs := pub.snapshot()
		return len(hbs) >= 2
	})
	_, hbs := pub.snapshot()
	want := Heartbeat{WorkerID: 42, URL: w.url, DataParallelSize: 2, BlockSize: 16, TotalKVBlocks: 16384,
		ModelName: "mock-model", MaxNumBatchedTokens: 8192}
	if hbs[0] != want {
		t.Fatalf("heartbeat %+v, want %+v", hbs[0], want)
	}
	complete(t, w.url, seqTokens(1, 32), 1, `,"dp_rank":1`, nil)
	w.stop()
	evs, _ := pub.snapshot()
	var cleared []uint32
	for _, ev := range evs {
		if ev.Kind == kv.EventCleared {
			cleared = append(cleared, ev.Worker.DpRank)
			wantID := uint64(0)
			if ev.Worker.DpRank == 1 {
				wantID = 1 // after rank 1's stored event
			}
			if ev.EventID != wantID {
				t.Fatalf("cleared event of rank %d has id %d, want %d", ev.Worker.DpRank, ev.EventID, wantID)
			}
		}
	}
	slices.Sort(cleared)
	if !slices.Equal(cleared, []uint32{0, 1}) {
		t.Fatalf("shutdown must clear every rank, cleared %v", cleared)
	}
}

func TestResetPrefixCacheEndpoint(t *testing.T) {
	w := startWorker(t, nil, nil)
	prompt := seqTokens(1, 40)
	complete(t, w.url, prompt, 1, "", nil)
	resp, err := http.Post(w.url+"/reset_prefix_cache", "application/json", nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("reset: %v %v", resp, err)
	}
	resp.Body.Close()
	if got := complete(t, w.url, prompt, 1, "", nil).Usage.PromptTokensDetails.CachedTokens; got != 0 {
		t.Fatalf("cache survived reset: %d cached", got)
	}
}
