package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// sseWorker streams max_tokens chunks and a usage chunk claiming half the
// prompt was cached; it counts the requests it served.
func sseWorker(t *testing.T, served *atomic.Int64) *httptest.Server {
	t.Helper()
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body completionRequest
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || !body.Stream {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		served.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; i < body.MaxTokens; i++ {
			time.Sleep(2 * time.Millisecond)
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
			fl.Flush()
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\n",
			len(body.Prompt), body.MaxTokens, len(body.Prompt)/2)
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
}

func TestClientMeasuresStream(t *testing.T) {
	var served atomic.Int64
	srv := sseWorker(t, &served)
	defer srv.Close()
	c := &Client{Model: "mock"}
	res := c.Do(context.Background(), srv.URL, Request{ID: "r", Prompt: Prompt{Tokens: make([]uint32, 64), MaxTokens: 5}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if res.OutputTokens != 5 || len(res.ITLs) != 4 || !res.HasUsage || res.PromptTokens != 64 || res.CachedTokens != 32 {
		t.Fatalf("result %+v", res)
	}
	if res.TTFT < 2*time.Millisecond || res.TTFT > res.End.Sub(res.Start) {
		t.Fatalf("TTFT %v outside (2ms, total %v)", res.TTFT, res.End.Sub(res.Start))
	}
}

func TestClientReportsFailures(t *testing.T) {
	truncated := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
	}))
	defer truncated.Close()
	refused := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusTooManyRequests)
	}))
	defer refused.Close()
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {oops\n\n")
	}))
	defer garbage.Close()
	c := &Client{}
	for name, url := range map[string]string{"truncated": truncated.URL, "429": refused.URL, "garbage": garbage.URL} {
		res := c.Do(context.Background(), url, Request{Prompt: Prompt{Tokens: []uint32{1}, MaxTokens: 3}})
		if !errors.Is(res.Err, ErrBadResponse) {
			t.Errorf("%s: got %v, want ErrBadResponse", name, res.Err)
		}
	}
}

func TestRunAndSummarize(t *testing.T) {
	var served atomic.Int64
	a, b := sseWorker(t, &served), sseWorker(t, &served)
	defer a.Close()
	defer b.Close()
	prompts, _ := RandomPrompts(RandomConfig{InputTokens: 32, OutputTokens: 4}, 10, 1)
	reqs, _ := PoissonSchedule(prompts, 200, 1)
	d, _ := NewDispatcher(PolicyRoundRobin, nil, []string{a.URL, b.URL, "http://127.0.0.1:1"}, 1)
	start := time.Now()
	results := Run(context.Background(), reqs, d, &Client{}, 5*time.Second)
	if elapsed := time.Since(start); elapsed < reqs[len(reqs)-1].Arrival {
		t.Fatalf("run took %v, less than the last arrival %v", elapsed, reqs[len(reqs)-1].Arrival)
	}
	p := Summarize(PolicyRoundRobin, 200, results)
	// Every third request goes to the dead address.
	if p.Errors != 3 || served.Load() != 7 {
		t.Fatalf("errors %d, served %d; want 3 and 7", p.Errors, served.Load())
	}
	if p.HitRate != 0.5 || p.TTFTP50 <= 0 || p.TTFTP99 < p.TTFTP90 || p.TTFTP90 < p.TTFTP50 || p.ITLP50 <= 0 || p.ThroughputTokS <= 0 {
		t.Fatalf("summary %+v", p)
	}
	if p.Name != PolicyRoundRobin || p.QPS != 200 {
		t.Fatalf("summary labels %+v", p)
	}
}

func TestSummarizeAllFailed(t *testing.T) {
	p := Summarize(PolicyRandom, 1, []Result{{Err: errors.New("x")}})
	if p.Errors != 1 || p.TTFTP90 != 0 || p.HitRate != 0 {
		t.Fatalf("summary %+v", p)
	}
	if _, err := json.Marshal(p); err != nil {
		t.Fatalf("an all-failed point is not valid JSON: %v", err)
	}
}

func TestClientUnaryCompletion(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body completionRequest
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Stream || body.StreamOptions != nil {
			http.Error(w, "want a unary request", http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"choices":[{"text":"abc"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":16}}}`,
			len(body.Prompt), body.MaxTokens)
	}))
	defer srv.Close()
	c := &Client{HTTP: srv.Client(), Model: "m", Unary: true}
	res := c.Do(context.Background(), srv.URL, Request{ID: "r", Prompt: Prompt{Tokens: make([]uint32, 32), MaxTokens: 5}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if !res.HasUsage || res.OutputTokens != 5 || res.PromptTokens != 32 || res.CachedTokens != 16 || res.TTFT <= 0 {
		t.Fatalf("result %+v", res)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"choices":[]}`) }))
	defer bad.Close()
	if res := c.Do(context.Background(), bad.URL, Request{ID: "r"}); !errors.Is(res.Err, ErrBadResponse) {
		t.Fatalf("a completion without choices: err %v", res.Err)
	}
}

// dropsFirst answers like next but closes the first connection with no
// answer, as a router replica killed before answering.
func dropsFirst(next http.HandlerFunc) *httptest.Server {
	var n atomic.Int64
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		next(w, r)
	}))
}

// A request whose connection closes with no answer is sent again as it
// was, up to Resumes times, and counted; without resumes it fails as cut.
func TestClientSendsAgainWithNoAnswer(t *testing.T) {
	var served atomic.Int64
	stream := sseWorker(t, &served)
	defer stream.Close()
	answers := map[bool]http.HandlerFunc{
		true: func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"choices":[{"text":"abc"}],"usage":{"prompt_tokens":2,"completion_tokens":3}}`)
		},
		false: func(w http.ResponseWriter, r *http.Request) {
			resp, err := http.Post(stream.URL+r.URL.Path, "application/json", r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.Copy(w, resp.Body)
		},
	}
	req := Request{ID: "r", Prompt: Prompt{Tokens: []uint32{1, 2}, MaxTokens: 3}}
	for _, unary := range []bool{true, false} {
		for _, resumes := range []int{0, 1} {
			srv := dropsFirst(answers[unary])
			c := &Client{HTTP: &http.Client{Transport: &http.Transport{}}, Unary: unary, Resumes: resumes}
			res := c.Do(context.Background(), srv.URL, req)
			srv.Close()
			if resumes == 0 {
				if !errors.Is(res.Err, ErrCut) {
					t.Fatalf("unary %v without resumes: err %v, want ErrCut", unary, res.Err)
				}
				continue
			}
			if res.Err != nil || res.Cuts != 1 || res.Resent != 1 || res.Resumed != 0 || res.OutputTokens != 3 {
				t.Fatalf("unary %v with a resume: %+v", unary, res)
			}
		}
	}
}
