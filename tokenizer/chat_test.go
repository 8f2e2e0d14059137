package tokenizer

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestChatErrors(t *testing.T) {
	tok := golden(t, "qwen3")
	for _, tc := range []struct {
		name, messages, want string
	}{
		{"not a list", `{"role":"user"}`, "messages must be a list"},
		{"empty", `[]`, "must not be empty"},
		{"no role", `[{"content":"hi"}]`, "messages[0].role"},
		{"bad content", `[{"role":"user","content":5}]`, "messages[0].content"},
		{"bad part", `[{"role":"user","content":[5]}]`, "messages[0].content[0]"},
		{"malformed", `[{"role":`, "malformed JSON"},
	} {
		_, err := tok.RenderChat(Chat{Messages: json.RawMessage(tc.messages)})
		var me *MessagesError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want a MessagesError with %q", tc.name, err, tc.want)
		}
	}
	gemma := golden(t, "gemma3")
	_, err := gemma.RenderChat(Chat{Messages: json.RawMessage(`[{"role":"user","content":"a"},{"role":"user","content":"b"}]`)})
	var te *TemplateError
	if !errors.As(err, &te) || !te.Raised || !strings.Contains(err.Error(), "Conversation roles must alternate") {
		t.Errorf("gemma3 non-alternating roles: %v, want the template's exception", err)
	}
	if _, err := golden(t, "gptoss").RenderChat(Chat{Messages: json.RawMessage(`[{"role":"user","content":"a"}]`)}); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("gptoss (no template in its package): %v, want ErrNoChatTemplate", err)
	}
	_, err = tok.RenderChat(Chat{Messages: json.RawMessage(`[{"role":"user","content":"a"}]`), Template: "{% if %}"})
	if !errors.As(err, &te) || te.Raised {
		t.Errorf("a template that does not parse: %v, want a TemplateError", err)
	}
}
