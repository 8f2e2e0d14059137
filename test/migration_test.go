package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/mockengine"
)

// streamed is what one client read from a streamed completion.
type streamed struct {
	ids    []uint32
	text   strings.Builder
	done   bool
	errors []string
	chunks chan int // content chunks read so far, after each one
}

// readStream reads an OpenAI completion stream to its end.
func readStream(t *testing.T, url string, body any, out *streamed) {
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		out.errors = append(out.errors, err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		out.errors = append(out.errors, fmt.Sprintf("status %d", resp.StatusCode))
		return
	}
	sc := bufio.NewScanner(resp.Body)
	n := 0
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			out.done = true
			continue
		}
		var c struct {
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Text     string   `json:"text"`
				TokenIDs []uint32 `json:"token_ids"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil || c.Error != nil {
			out.errors = append(out.errors, line)
			continue
		}
		for _, ch := range c.Choices {
			out.ids = append(out.ids, ch.TokenIDs...)
			out.text.WriteString(ch.Text)
			n++
			select {
			case out.chunks <- n:
			default:
			}
		}
	}
	if err := sc.Err(); err != nil {
		out.errors = append(out.errors, err.Error())
	}
}

// TestEngineKilledMidStream: six streams run on three mock engines; the
// engine serving the most of them dies (every connection dropped, as a
// killed process's) once each stream has sent some text. Every client
// still reads its whole completion, ended by [DONE], with no error: the
// proxy continued each cut stream on another engine from the text
// already sent. Each client's text is exactly what an uninterrupted run
// produces (the mock engine's output depends only on the context), so no
// token was lost or sent twice.
func TestEngineKilledMidStream(t *testing.T) {
	rep := StartReplica(t, nil)
	base := BaseURL(rep)
	slow := func(c *mockengine.ServerConfig) { c.Engine.Speedup = 1 }
	engines := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		engines[id] = StartMockWorker(t, rep, id, slow)
	}
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		if n := len(workers(t, base).Workers); n != 3 {
			return fmt.Errorf("%d workers", n)
		}
		return nil
	})
	const streams, maxTokens = 6, 120
	outs := make([]*streamed, streams)
	prompts := make([][]uint32, streams)
	var wg sync.WaitGroup
	for i := range outs {
		outs[i] = &streamed{chunks: make(chan int, 1)}
		prompts[i] = tokens(256, uint32(100+i))
		wg.Go(func() {
			readStream(t, base, map[string]any{"prompt": prompts[i], "max_tokens": maxTokens, "stream": true}, outs[i])
		})
	}
	// Every stream has sent some text.
	for i, o := range outs {
		deadline := time.After(10 * time.Second)
		for n := 0; n < 5; {
			select {
			case n = <-o.chunks:
			case <-deadline:
				t.Fatalf("stream %d sent %d chunks in 10 s", i, n)
			}
		}
	}
	// The victim is the engine generating the most streams right now
	// (the router's view lags: a finished stream may still be relayed).
	victim, most := uint64(0), 0
	for id, url := range engines {
		var stats []struct{ Running int }
		if code := getJSON(t, url+"/stats", &stats); code != 200 {
			t.Fatalf("engine %d stats: %d", id, code)
		}
		if n := stats[0].Running; n > most {
			victim, most = id, n
		}
	}
	if most == 0 {
		t.Fatal("no engine is generating a stream")
	}
	// A prompt cached on the victim only, for after its death.
	cachedThere := tokens(256, 999)
	if code := Post(t, engines[victim]+"/v1/completions", map[string]any{"prompt": cachedThere, "max_tokens": 1}, nil); code != 200 {
		t.Fatalf("warming engine %d: %d", victim, code)
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		var got routeReply
		Post(t, base+"/route", map[string]any{"token_ids": cachedThere, "update_states": false}, &got)
		if got.WorkerID != victim {
			return fmt.Errorf("the warmed prompt routes to %d, not %d", got.WorkerID, victim)
		}
		return nil
	})
	if code := Post(t, engines[victim]+"/fault", map[string]any{"dead": true}, nil); code != 200 {
		t.Fatalf("killing engine %d: %d", victim, code)
	}
	wg.Wait()
	failed := 0
	for i, o := range outs {
		want := mockengine.GeneratedTokens(prompts[i], maxTokens)
		var wantText strings.Builder
		for _, id := range want {
			fmt.Fprintf(&wantText, " t%d", id)
		}
		if len(o.errors) > 0 || !o.done {
			failed++
			t.Errorf("stream %d: errors %q, [DONE] %v", i, o.errors, o.done)
		}
		if !slices.Equal(o.ids, want) || o.text.String() != wantText.String() {
			t.Errorf("stream %d: %d tokens differ from the uninterrupted run's %d (first difference at %d)",
				i, len(o.ids), len(want), firstDiff(o.ids, want))
		}
	}
	_, m := Get(t, base+"/metrics")
	moved := metricSum(m, `kvrouter_migrations_total{outcome="migrated",reason="stream_cut"}`)
	t.Logf("engine %d killed holding %d of %d streams: %v streams moved mid-stream, %d clients saw an error or a cut stream",
		victim, most, streams, moved, failed)
	if moved < 1 {
		t.Fatalf("no stream moved; the dead engine was generating %d", most)
	}

	// The dead engine is still registered: a request routed to it now
	// (its cache holds the prompt) is dropped before any answer and sent
	// to another engine.
	var answer struct {
		Choices []struct {
			TokenIDs []uint32 `json:"token_ids"`
		} `json:"choices"`
	}
	if code := Post(t, base+"/v1/completions", map[string]any{"prompt": cachedThere, "max_tokens": 8}, &answer); code != 200 ||
		len(answer.Choices) != 1 || !slices.Equal(answer.Choices[0].TokenIDs, mockengine.GeneratedTokens(cachedThere, 8)) {
		t.Fatalf("unary completion after the engine died: %d %+v", code, answer)
	}
	_, m = Get(t, base+"/metrics")
	unreachable := metricSum(m, `kvrouter_migrations_total{outcome="migrated",reason="unreachable"}`)
	t.Logf("a unary completion routed to the dead engine: %v moved before any answer", unreachable)
	if unreachable != 1 {
		t.Fatalf("%v unary completions moved before any answer, want 1", unreachable)
	}
	testutil.EventuallyNil(t, 5*time.Second, func() error {
		if n := activeRequests(t, base); n != 0 {
			return fmt.Errorf("%d requests still active", n)
		}
		return nil
	})
}

func getJSON(t *testing.T, url string, out any) int {
	t.Helper()
	code, body := Get(t, url)
	if err := json.Unmarshal([]byte(body), out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return code
}

func firstDiff(a, b []uint32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
