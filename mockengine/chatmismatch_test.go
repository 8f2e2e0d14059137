package mockengine

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// toolHistory is the shape OpenAI clients send back after a tool call:
// the assistant's message has content null and its arguments as a JSON
// string.
const toolHistory = `[{"role":"user","content":"Weather in Paris?"},` +
	`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
	`{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"21C"},{"type":"text","text":"clear"}]}]`

func tokenizeCount(t *testing.T, url, messages string) (int, int) {
	t.Helper()
	r := postPath(t, url+"/tokenize", `{"model":"m","messages":`+messages+`}`, nil)
	defer r.Body.Close()
	var tk struct {
		Count int `json:"count"`
	}
	if r.StatusCode != http.StatusOK {
		return 0, r.StatusCode
	}
	if err := json.NewDecoder(r.Body).Decode(&tk); err != nil {
		t.Fatal(err)
	}
	return tk.Count, r.StatusCode
}

// The mock renders chats as vLLM does (tool history with content null and
// text-part tool results is a 200, with vLLM's tokens), and its mismatch
// modes render them otherwise on purpose.
func TestChatEngineRenderingAndMismatch(t *testing.T) {
	tok := qwen3(t)
	want, _, err := tok.EncodeChat(tokenizer.Chat{Messages: json.RawMessage(toolHistory), AddGenerationPrompt: true})
	if err != nil {
		t.Fatalf("the vLLM rendering of tool history: %v", err)
	}
	raw, _, rawErr := tok.EncodeChat(tokenizer.Chat{Messages: json.RawMessage(testMessages), AddGenerationPrompt: true, Raw: true})
	if rawErr != nil {
		t.Fatal(rawErr)
	}

	w := startWorker(t, func(c *ServerConfig) { c.Tokenizer = tok }, &fakePublisher{})
	if n, code := tokenizeCount(t, w.url, toolHistory); code != http.StatusOK || n != len(want) {
		t.Fatalf("tool history: %d tokens (status %d), want %d", n, code, len(want))
	}

	// raw-messages: the template gets content null and fails, as the
	// router did before it reproduced vLLM.
	wr := startWorker(t, func(c *ServerConfig) { c.Tokenizer = tok; c.ChatMismatch = ChatMismatchRawMessages }, &fakePublisher{})
	if _, code := tokenizeCount(t, wr.url, toolHistory); code != http.StatusBadRequest {
		t.Fatalf("raw-messages tool history: status %d, want 400", code)
	}
	if n, _ := tokenizeCount(t, wr.url, testMessages); n != len(raw) {
		t.Fatalf("raw-messages plain chat: %d tokens, want %d", n, len(raw))
	}

	// template: another template, so every count is off.
	wt := startWorker(t, func(c *ServerConfig) { c.Tokenizer = tok; c.ChatMismatch = ChatMismatchTemplate }, &fakePublisher{})
	n, code := tokenizeCount(t, wt.url, toolHistory)
	if code != http.StatusOK || n <= len(want) {
		t.Fatalf("template mismatch: %d tokens (status %d), want more than %d", n, code, len(want))
	}
	prefix := len(tok.Encode(MismatchTemplatePrefix, false))
	if n != len(want)+prefix {
		t.Errorf("template mismatch: %d tokens, want %d + the prefix's %d", n, len(want), prefix)
	}
}

func TestParseChatMismatch(t *testing.T) {
	for in, want := range map[string]ChatMismatch{"": ChatMismatchNone, "none": ChatMismatchNone, "raw-messages": ChatMismatchRawMessages, "template": ChatMismatchTemplate} {
		if got, err := ParseChatMismatch(in); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	if _, err := ParseChatMismatch("sometimes"); err == nil {
		t.Error("an unknown mode parsed")
	}
}
