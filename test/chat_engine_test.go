package test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
)

// toolTurn is an OpenAI tool-calling conversation as clients send it
// back: the assistant's tool call with content null and its arguments as
// a JSON string, the tool's result as text parts.
const toolTurn = `{"role":"system","content":"You are a weather assistant. Use the tools to answer, and answer in one short sentence with the temperature in Celsius."},` +
	`{"role":"user","content":"What is the weather in Paris right now? I am deciding whether to bring an umbrella to the museum this afternoon."},` +
	`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},` +
	`{"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"{\"temp\": 21, \"sky\": \"light rain\"}"}]}`

const weatherTools = `[{"type":"function","function":{"name":"get_weather","description":"Get the current weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]}}}]`

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func chatCompletion(t *testing.T, base, messages string) chatUsage {
	t.Helper()
	body := `{"model":"qwen3","max_tokens":2,"tools":` + weatherTools + `,"messages":[` + messages + `]}`
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat completion: %d %s", resp.StatusCode, raw)
	}
	var out struct {
		Usage chatUsage `json:"usage"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out.Usage
}

// TestToolHistoryThroughProxy sends tool-calling history as OpenAI
// clients send it through a replica to mock engines that render like
// vLLM: the router counts the engine's tokens, and the next turn hits the
// blocks the first one stored on the worker the router picked again.
func TestToolHistoryThroughProxy(t *testing.T) {
	base := startQwen3Fleet(t, 2)

	first := chatCompletion(t, base, toolTurn)
	next := toolTurn + `,{"role":"assistant","content":"It is 21°C with light rain in Paris: take the umbrella."},{"role":"user","content":"And in Rome?"}`
	// The router's count of the next turn is the engine's.
	resp, err := http.Post(base+"/route", "application/json", bytes.NewReader([]byte(`{"model":"qwen3","update_states":false,"tools":`+weatherTools+`,"messages":[`+next+`]}`)))
	if err != nil {
		t.Fatal(err)
	}
	var route struct {
		PromptTokens int `json:"prompt_tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&route); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/route: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	var second chatUsage
	testutil.Eventually(t, 5*time.Second, "the second turn hits the first turn's blocks", func() bool {
		second = chatCompletion(t, base, next)
		return second.PromptTokensDetails.CachedTokens >= first.PromptTokens/16*16
	})
	if route.PromptTokens != second.PromptTokens {
		t.Errorf("router counts %d tokens, the engine %d", route.PromptTokens, second.PromptTokens)
	}
	t.Logf("tool history: first turn %d tokens; next turn %d tokens, %d cached", first.PromptTokens, second.PromptTokens, second.PromptTokensDetails.CachedTokens)
}
