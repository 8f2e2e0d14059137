package tokenizer

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkRenderChatToolHistory renders (without encoding) a 20-turn
// tool-using conversation with Qwen3's template: the cost of the
// engine's message preprocessing and the render on the routing path.
func BenchmarkRenderChatToolHistory(b *testing.B) {
	tok := golden(b, "qwen3")
	var msgs []string
	msgs = append(msgs, `{"role":"system","content":"You are a weather assistant."}`)
	for i := 0; i < 20; i++ {
		msgs = append(msgs,
			`{"role":"user","content":"Weather in city number `+strings.Repeat("x", i)+`?"}`,
			`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]}`,
			`{"role":"tool","tool_call_id":"c","content":"{\"temp\": 21, \"sky\": \"clear\"}"}`,
			`{"role":"assistant","content":"It is 21 degrees and clear."}`)
	}
	chat := Chat{Messages: json.RawMessage("[" + strings.Join(msgs, ",") + "]"), AddGenerationPrompt: true,
		Tools: json.RawMessage(`[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`)}
	b.SetBytes(int64(len(chat.Messages)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tok.RenderChat(chat); err != nil {
			b.Fatal(err)
		}
	}
}
