package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// chatConversations builds n multi-turn conversations of about 4k Qwen3
// tokens each (distinct system prompts, turns cut from the benchmark
// text) as messages JSON.
func chatConversations(b *testing.B, n int) []string {
	raw, err := os.ReadFile(filepath.Join("..", "tokenizer", "testdata", "golden", "bench_en.txt"))
	if err != nil {
		b.Fatal(err)
	}
	sentences := strings.SplitAfter(string(raw), ". ")
	var out []string
	for c := 0; c < n; c++ {
		type msg struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		msgs := []msg{{"system", fmt.Sprintf("You are assistant number %d of the fleet. Answer precisely.", c)}}
		k := c * 7
		for turn := 0; turn < 16; turn++ {
			var b strings.Builder
			for j := 0; j < 10; j++ {
				b.WriteString(sentences[k%len(sentences)])
				k++
			}
			role := "user"
			if turn%2 == 1 {
				role = "assistant"
			}
			msgs = append(msgs, msg{role, b.String()})
		}
		js, _ := json.Marshal(msgs)
		out = append(out, string(js))
	}
	return out
}

// BenchmarkHTTPRouteChat measures /route over HTTP keep-alive (64
// workers) for ~4k-token chats sent as messages (the router renders
// Qwen3's template and tokenizes) and the same prompts sent as token ids:
// decisions/s with 8 clients per core (BenchmarkHTTPRoute's load), and
// the latency per decision of one client at a time (/sequential: what a
// chat adds to a decision).
func BenchmarkHTTPRouteChat(b *testing.B) {
	models := testModels(b)
	tok := models.byName["qwen3"].tok
	convs := chatConversations(b, 8)
	bodies := map[string][][]byte{}
	tokens := 0
	for _, m := range convs {
		ids, _, err := tok.EncodeChat(tokenizer.Chat{Messages: json.RawMessage(m), AddGenerationPrompt: true})
		if err != nil {
			b.Fatal(err)
		}
		tokens += len(ids)
		var buf bytes.Buffer
		buf.WriteString(`{"update_states":false,"token_ids":[`)
		for i, id := range ids {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(strconv.FormatUint(uint64(id), 10))
		}
		buf.WriteString(`]}`)
		bodies["token_ids"] = append(bodies["token_ids"], buf.Bytes())
		bodies["chat"] = append(bodies["chat"], []byte(`{"update_states":false,"model":"qwen3","messages":`+m+`}`))
	}
	s, _ := newTestServer(b, 64)
	s.opts.Models = models
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, run := range []struct {
		kind    string
		clients int
	}{{"token_ids", 8 * runtime.GOMAXPROCS(0)}, {"chat", 8 * runtime.GOMAXPROCS(0)}, {"token_ids", 1}, {"chat", 1}} {
		name := run.kind
		if run.clients == 1 {
			name += "/sequential" // one client, one request at a time: the latency a chat adds
		}
		b.Run(name, func(b *testing.B) {
			measureRoute(b, srv.URL+"/route", bodies[run.kind], run.clients)
			b.ReportMetric(float64(tokens/len(bodies[run.kind])), "tokens/prompt")
		})
	}
}

// measureRoute sends b.N /route requests from clients concurrent
// keep-alive clients and reports decisions/s and latency percentiles.
func measureRoute(b *testing.B, url string, prompts [][]byte, clients int) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	var next atomic.Int64
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				t0 := time.Now()
				resp, err := client.Post(url, "application/json", bytes.NewReader(prompts[int(i)%len(prompts)]))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = drain(resp)
				if resp.StatusCode != 200 {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) > 0 {
		b.ReportMetric(float64(len(all))/elapsed.Seconds(), "decisions/s")
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-us")
	}
}

// BenchmarkTokenizeChat is the router's added work per chat decision
// without HTTP: render the template and tokenize a ~4k-token chat.
func BenchmarkTokenizeChat(b *testing.B) {
	tok := testModels(b).byName["qwen3"].tok
	convs := chatConversations(b, 8)
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, _, err := tok.EncodeChat(tokenizer.Chat{Messages: json.RawMessage(convs[i%8]), AddGenerationPrompt: true}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
