package httpapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// vLLM-shaped engines that stream token ids (return_token_ids): one that
// gets the client's prompt dies after two tokens, one that gets a longer
// prompt (a continuation) streams the rest. Whichever the router picks
// first, the client reads one stream: every token once, [DONE], and the
// usage of the whole generation.
func TestStreamContinuesOnAnotherEngine(t *testing.T) {
	prompt := []uint32{1, 2, 3}
	engine := func(w http.ResponseWriter, r *http.Request, body []byte) {
		var req struct {
			Prompt    []uint32 `json:"prompt"`
			MaxTokens int      `json:"max_tokens"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		// The whole generation is 100, 101, 102, 103: a continuation
		// picks up after the prompt's generated tail.
		from := len(req.Prompt) - len(prompt)
		for i := 0; i < req.MaxTokens; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\" t%d\",\"token_ids\":[%d]}]}\n\n", 100+from+i, 100+from+i)
			w.(http.Flusher).Flush()
			if from == 0 && i == 1 {
				panic(http.ErrAbortHandler) // the engine dies mid-stream
			}
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
			len(req.Prompt), req.MaxTokens, len(req.Prompt)+req.MaxTokens)
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
	a, b := startEngineStub(t, engine), startEngineStub(t, engine)
	url, r := startPDRig(t, pdWorker{1, a.srv.URL, kv.RoleBoth}, pdWorker{2, b.srv.URL, kv.RoleBoth})

	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":[1,2,3],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ids []uint32
	var text strings.Builder
	var usage map[string]int
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		switch {
		case !ok:
		case data == "[DONE]":
			done = true
		default:
			var c struct {
				Choices []struct {
					Text     string   `json:"text"`
					TokenIDs []uint32 `json:"token_ids"`
				} `json:"choices"`
				Usage map[string]int `json:"usage"`
				Error any            `json:"error"`
			}
			if err := json.Unmarshal([]byte(data), &c); err != nil || c.Error != nil {
				t.Fatalf("chunk %q", data)
			}
			for _, ch := range c.Choices {
				ids = append(ids, ch.TokenIDs...)
				text.WriteString(ch.Text)
			}
			if c.Usage != nil {
				usage = c.Usage
			}
		}
	}
	if !done || !slices.Equal(ids, []uint32{100, 101, 102, 103}) || text.String() != " t100 t101 t102 t103" {
		t.Fatalf("client read %v %q, [DONE] %v", ids, text.String(), done)
	}
	if usage["prompt_tokens"] != 3 || usage["completion_tokens"] != 4 || usage["total_tokens"] != 7 {
		t.Fatalf("usage %v, want 3 prompt + 4 completion", usage)
	}
	// The continuation: the prompt with the two tokens sent, two to go.
	var cont []byte
	for _, s := range []*vllmStub{a, b} {
		bodies, _ := s.seen()
		for _, body := range bodies {
			if !strings.Contains(string(body), `"prompt":[1,2,3],`) {
				cont = body
			}
		}
	}
	var c struct {
		Prompt    []uint32 `json:"prompt"`
		MaxTokens int      `json:"max_tokens"`
	}
	if err := json.Unmarshal(cont, &c); err != nil || !slices.Equal(c.Prompt, []uint32{1, 2, 3, 100, 101}) || c.MaxTokens != 2 {
		t.Fatalf("continuation %s", cont)
	}
	_, m := getText(t, url+"/metrics")
	if !strings.Contains(m, `kvrouter_migrations_total{outcome="migrated",reason="stream_cut"} 1`) {
		t.Fatalf("migration not counted:\n%s", grepLines(m, "kvrouter_migrations_total"))
	}
	settled(t, r)
}

// A cut stream with no other worker to continue it ends with an error
// event and no [DONE], after the text already sent (once), counted as
// no_worker.
func TestStreamCutWithNoOtherWorker(t *testing.T) {
	cut := func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" x\",\"token_ids\":[7]}]}\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	a := startEngineStub(t, cut)
	url, r := startPDRig(t, pdWorker{1, a.srv.URL, kv.RoleBoth})
	_, body := postText(t, url+"/v1/completions", `{"prompt":[1,2,3],"max_tokens":4,"stream":true}`)
	if strings.Contains(body, "[DONE]") || !strings.Contains(body, `"error"`) || strings.Count(body, `" x"`) != 1 {
		t.Fatalf("cut stream relayed as %q", body)
	}
	_, m := getText(t, url+"/metrics")
	if !strings.Contains(m, `kvrouter_migrations_total{outcome="no_worker",reason="stream_cut"} 1`) {
		t.Fatalf("migration outcome:\n%s", grepLines(m, "kvrouter_migrations_total"))
	}
	settled(t, r)
}

// startEngineStub is startVLLMStub with the request in hand.
func startEngineStub(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, body []byte)) *vllmStub {
	v := &vllmStub{}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		v.mu.Lock()
		v.bodies, v.headers = append(v.bodies, raw), append(v.headers, r.Header.Clone())
		v.mu.Unlock()
		answer(w, r, raw)
	}))
	t.Cleanup(v.srv.Close)
	return v
}

func getText(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func postText(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
