package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestChatPromptsGrowConversations(t *testing.T) {
	c := ChatConfig{Conversations: 3, Turns: 4, SystemWords: 20, UserWords: 5, ReplyWords: 4, OutputTokens: 8}
	a, err := ChatPrompts(c, 12, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ChatPrompts(c, 12, 7)
	for i := range a {
		if string(a[i].Messages) != string(b[i].Messages) || a[i].Tokens != nil || a[i].MaxTokens != 8 {
			t.Fatalf("prompt %d: not deterministic or not a chat: %+v", i, a[i])
		}
	}
	// Turn t+1 of a conversation repeats turn t's messages (and its reply).
	var first, second []chatMessage
	if err := json.Unmarshal(a[0].Messages, &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(a[3].Messages, &second); err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || len(second) != 4 || first[0] != second[0] || first[1] != second[1] || second[2].Role != "assistant" {
		t.Fatalf("turns: %+v then %+v", first, second)
	}
	if _, err := ChatPrompts(ChatConfig{Conversations: 1, Turns: 1, UserWords: 0, ReplyWords: 1, OutputTokens: 1}, 1, 1); err == nil {
		t.Error("empty user messages accepted")
	}
	w := WorkloadOptions{Kind: WorkloadChat, Chat: c, Requests: 5}
	sched, points, err := w.Build([]float64{10})
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := sched(points[0])
	if err != nil || len(reqs) != 5 || reqs[0].Messages == nil {
		t.Fatalf("chat schedule: %d requests, %v", len(reqs), err)
	}
}

func TestClientSendsChat(t *testing.T) {
	var path, body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		path, body = r.URL.Path, string(raw)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	c := &Client{Model: "qwen3"}
	res := c.Do(context.Background(), srv.URL, Request{ID: "1", Prompt: Prompt{Messages: []byte(`[{"role":"user","content":"hi"}]`), MaxTokens: 1}})
	if res.Err != nil || path != "/v1/chat/completions" || !strings.Contains(body, `"messages":[{"role":"user","content":"hi"}]`) ||
		!strings.Contains(body, `"model":"qwen3"`) || res.CachedTokens != 32 || res.OutputTokens != 1 {
		t.Fatalf("chat request: %v %s %s %+v", res.Err, path, body, res)
	}
}
