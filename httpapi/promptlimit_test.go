package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/metrics"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// promptServer is a server with the Qwen3 models, max-prompt-tokens set
// and the default body cap (8 MiB).
func promptServer(t testing.TB, maxPrompt int) *Server {
	t.Helper()
	cfg := actors.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Shards = 2
	cfg.Limits.MaxPromptTokens = maxPrompt
	r, err := actors.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return New(Options{Router: r, Metrics: metrics.New(), BlockSize: cfg.BlockSize, Proxy: true,
		Models: testModels(t), Log: slog.New(slog.DiscardHandler), Client: http.DefaultClient})
}

func refused(s *Server, reason string) float64 {
	return testutil.ToFloat64(s.opts.Metrics.PromptsRefused.WithLabelValues(reason))
}

// An 8 MB text prompt over max-prompt-tokens is refused in milliseconds,
// before it is decoded or tokenized, on every endpoint that takes text
// (it used to cost seconds of CPU: one repeated character, merged whole).
func TestOverLimitPromptRefusedBeforeWork(t *testing.T) {
	s := promptServer(t, 32768)
	prompt := strings.Repeat("a", 8_000_000)
	for _, path := range []string{"/route", "/overlap_scores", "/potential_loads", "/v1/completions"} {
		body := `{"model":"qwen3","prompt":"` + prompt + `"}`
		start := time.Now()
		code, out := do(t, s, "POST", path, body)
		d := time.Since(start)
		if code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "max-prompt-tokens") {
			t.Fatalf("%s: %d %v, want 400 naming max-prompt-tokens", path, code, out)
		}
		if d > 500*time.Millisecond {
			t.Errorf("%s: refusing took %v", path, d)
		}
	}
	if n := refused(s, refusedLength); n != 4 {
		t.Errorf("refused by length: %v, want 4", n)
	}
}

// A prompt the length test cannot decide (English, 4 bytes a token) is
// tokenized until the count passes the limit; one at the limit is
// routed. Chat prompts are checked once rendered.
func TestPromptLimitByTokens(t *testing.T) {
	text := strings.Repeat("The router hashes every block of the prompt. ", 30)
	n := len(testModels(t).byName["qwen3"].tok.Encode(text, true))
	s := promptServer(t, n)
	if code, out := do(t, s, "POST", "/overlap_scores", fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, text)); code != 200 || out["prompt_tokens"] != float64(n) {
		t.Fatalf("a prompt of exactly max-prompt-tokens: %d %v", code, out)
	}
	s = promptServer(t, n-1)
	if code, out := do(t, s, "POST", "/overlap_scores", fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, text)); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "max-prompt-tokens") {
		t.Fatalf("one token over: %d %v", code, out)
	}
	if refused(s, refusedTokens) != 1 || refused(s, refusedLength) != 0 {
		t.Fatalf("counted: tokens %v, length %v", refused(s, refusedTokens), refused(s, refusedLength))
	}
	msgs, _ := json.Marshal([]map[string]string{{"role": "user", "content": strings.Repeat("a", 1<<20)}})
	if code, out := do(t, s, "POST", "/route", `{"model":"qwen3","messages":`+string(msgs)+`}`); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "max-prompt-tokens") {
		t.Fatalf("a long chat: %d %v", code, out)
	}
	if refused(s, refusedLength) != 1 {
		t.Fatalf("the rendered chat was not refused by its length: %v", refused(s, refusedLength))
	}
}

// Bodies over the guard's threshold whose prompt fits pass through
// unchanged (the guard reads them once and hands them on).
func TestPromptGuardPassesWhatFits(t *testing.T) {
	s := promptServer(t, 64)
	threshold := s.promptCheckThreshold(64) // 64 × 128 ASCII bytes
	// A short prompt behind a long other field: the body is over the
	// threshold, the prompt is not.
	pad := strings.Repeat("x", threshold+100)
	code, out := do(t, s, "POST", "/route", `{"model":"qwen3","request_id":"`+pad[:10]+`","lora_name":"","prompt":"hello there","update_states":false,"x":"`+pad+`"}`)
	if code == 400 && strings.Contains(fmt.Sprint(out["error"]), "max-prompt-tokens") {
		t.Fatalf("a short prompt in a long body was refused: %v", out)
	}
	// A prompt just over the threshold in bytes but not provably over
	// the limit (non-ASCII: NFC may shrink it) reaches the tokenizer.
	p := strings.Repeat("é", threshold/2+10)
	code, out = do(t, s, "POST", "/route", fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, p))
	if code != 400 || refused(s, refusedTokens)+refused(s, refusedLength) != 1 {
		t.Fatalf("a long non-ASCII prompt: %d %v (refused: %v by tokens, %v by length)", code, out, refused(s, refusedTokens), refused(s, refusedLength))
	}
}

// promptTextSize measures what encoding/json decodes.
func FuzzPromptTextSize(f *testing.F) {
	for _, s := range []string{`{"prompt":"hello"}`, `{"model":"m","prompt":["a\nb\u00e9\ud83d\ude00"]}`, `{"prompt":"\ud800x\"\\"}`, `{"a":{"b":[1,"]"]},"prompt":"x"}`, `{"prompt":"\u0041\/"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, ascii, found := promptTextSize(body)
		var v struct {
			Prompt json.RawMessage `json:"prompt"`
		}
		if !utf8.Valid(body) || json.Unmarshal(body, &v) != nil || !found {
			return
		}
		var text string
		if err := json.Unmarshal(v.Prompt, &text); err != nil {
			var list []json.RawMessage
			if json.Unmarshal(v.Prompt, &list) != nil || len(list) == 0 || json.Unmarshal(list[0], &text) != nil {
				return
			}
		}
		if n != len(text) || ascii != tokenizer.CountASCII(text) {
			t.Fatalf("%q: measured %d bytes (%d ASCII), decoded %d (%d)", body, n, ascii, len(text), tokenizer.CountASCII(text))
		}
	})
}

// BenchmarkRefuseOverLimit8MB is the time to refuse an 8 MB text prompt
// over max-prompt-tokens through the HTTP handler (/handler) and over a
// loopback connection (/loopback: sending 8 MB included).
func BenchmarkRefuseOverLimit8MB(b *testing.B) {
	s := promptServer(b, 32768)
	body := []byte(`{"model":"qwen3","prompt":"` + strings.Repeat("a", 8_000_000) + `"}`)
	bodyText := string(body)
	b.Run("handler", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		defer reportCPU(b)()
		for b.Loop() {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, localRequest("POST", "/v1/completions", bodyText))
			if rec.Code != 400 {
				b.Fatalf("%d %s", rec.Code, rec.Body)
			}
		}
	})
	b.Run("loopback", func(b *testing.B) {
		srv := httptest.NewServer(s.Handler())
		defer srv.Close()
		b.SetBytes(int64(len(body)))
		defer reportCPU(b)()
		for b.Loop() {
			resp, err := http.Post(srv.URL+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 400 {
				b.Fatal(resp.Status)
			}
		}
	})
}

// reportCPU reports the process's CPU time per op (user + system, every
// goroutine: the garbage collector's too), which a busy machine does not
// inflate the way it does wall time.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() { b.ReportMetric(float64((cpuTime()-start).Microseconds())/1e3/float64(b.N), "cpu-ms/op") }
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A later key that encoding/json would decode as the prompt instead
// (repeated, another case, escaped) keeps the guard out: it never
// refuses a prompt the decoder would not see.
func TestPromptTextSizeLastKeyWins(t *testing.T) {
	for _, tc := range []struct {
		body  string
		found bool
		n     int
	}{
		{`{"prompt":"abc"}`, true, 3},
		{`{"model":"m","prompt":["abcd"],"max_tokens":3}`, true, 4},
		{`{"prompt":[ "ab" , "c"] , "stream":true}`, true, 2},
		{`{"prompt":"abc","prompt":"x"}`, false, 0},
		{`{"prompt":"abc","Prompt":"x"}`, false, 0},
		{`{"prompt":"abc","\u0070rompt":"x"}`, false, 0},
		{`{"prompt":"abc","x":{"prompt":"y"}}`, true, 3},
		{`{"prompt":[1,2,3]}`, false, 0},
		{`{"prompt":"abc",}`, false, 0},
	} {
		n, _, found := promptTextSize([]byte(tc.body))
		if found != tc.found || found && n != tc.n {
			t.Errorf("%s: %d bytes, found %v; want %d, %v", tc.body, n, found, tc.n, tc.found)
		}
	}
}
