package tokenizer

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// asJSON prints template values with tojson (keys in order).
func asJSON(t *testing.T, v any) string {
	t.Helper()
	tpl, err := jinja.Parse("{{ v | tojson }}")
	if err != nil {
		t.Fatal(err)
	}
	out, err := tpl.Render(map[string]any{"v": v})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The engines' message rules, one at a time (vLLM's chat_utils.py and
// SGLang's serving_chat.py; docs/chat-rendering.md cites each).
func TestNormalizeMessages(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dialect  Dialect
		format   ContentFormat
		messages string
		want     string // tojson of the conversation, or "error: ..." substring
	}{
		{"vllm null content is empty text", DialectVLLM, ContentString,
			`[{"role":"assistant","content":null}]`, `[{"role": "assistant", "content": ""}]`},
		{"vllm null content is no parts for openai templates", DialectVLLM, ContentOpenAI,
			`[{"role":"assistant","content":null}]`, `[{"role": "assistant", "content": []}]`},
		{"vllm missing content", DialectVLLM, ContentString,
			`[{"role":"user"}]`, `[{"role": "user", "content": ""}]`},
		{"vllm text parts join with newline, textless part skipped", DialectVLLM, ContentString,
			`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":null},{"type":"input_text","text":"b"}]}]`,
			`[{"role": "user", "content": "a\nb"}]`},
		{"vllm string content becomes a text part for openai templates", DialectVLLM, ContentOpenAI,
			`[{"role":"user","content":"hi"}]`, `[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]`},
		{"vllm image part for openai templates", DialectVLLM, ContentOpenAI,
			`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"what?"}]}]`,
			`[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what?"}]}]`},
		{"vllm image part for string templates is refused", DialectVLLM, ContentString,
			`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]`, "error: multimodal placeholder"},
		{"vllm unknown part type", DialectVLLM, ContentString,
			`[{"role":"user","content":[{"type":"hologram"}]}]`, "error: unsupported content part type"},
		{"vllm tool call arguments parsed; bad JSON and null become {}", DialectVLLM, ContentString,
			`[{"role":"assistant","content":null,"tool_calls":[
				{"id":"1","type":"function","function":{"name":"f","arguments":"{\"city\": \"Paris\", \"t\": 1.0}"}},
				{"id":"2","type":"function","function":{"name":"f","arguments":"{bad"}},
				{"id":"3","type":"function","function":{"name":"f","arguments":null}},
				{"id":"4","type":"function","function":{"name":"f","arguments":{"kept":true}}}]}]`,
			`[{"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": {"city": "Paris", "t": 1.0}}}, ` +
				`{"id": "2", "type": "function", "function": {"name": "f", "arguments": {}}}, {"id": "3", "type": "function", "function": {"name": "f", "arguments": {}}}, ` +
				`{"id": "4", "type": "function", "function": {"name": "f", "arguments": {"kept": true}}}]}]`},
		{"vllm empty tool_calls dropped, unknown fields dropped, name kept", DialectVLLM, ContentString,
			`[{"role":"assistant","content":"x","tool_calls":[],"extra":1,"name":"bob"}]`,
			`[{"role": "assistant", "content": "x", "name": "bob"}]`},
		{"vllm reasoning_content is reasoning, both names reach the template", DialectVLLM, ContentString,
			`[{"role":"assistant","content":"4","reasoning_content":"sum"}]`,
			`[{"role": "assistant", "content": "4", "reasoning": "sum", "reasoning_content": "sum"}]`},
		{"vllm tool text parts become one string even for openai templates", DialectVLLM, ContentOpenAI,
			`[{"role":"tool","tool_call_id":"c","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`,
			`[{"role": "tool", "content": "a\nb", "tool_call_id": "c"}]`},
		{"sglang null content is empty text for every format", DialectSGLang, ContentOpenAI,
			`[{"role":"assistant","content":null,"name":null}]`, `[{"role": "assistant", "content": ""}]`},
		{"sglang text parts join with a space", DialectSGLang, ContentString,
			`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]}]`,
			`[{"role": "user", "content": "a b"}]`},
		{"sglang keeps other fields", DialectSGLang, ContentString,
			`[{"role":"user","content":"a","extra":1}]`, `[{"role": "user", "content": "a", "extra": 1}]`},
		{"sglang refuses arguments that are not a JSON object", DialectSGLang, ContentString,
			`[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"[1]"}}]}]`,
			"error: must be a JSON object"},
		{"sglang refuses invalid arguments", DialectSGLang, ContentString,
			`[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{bad"}}]}]`,
			"error: must be valid JSON"},
		{"sglang tool text parts join with a space", DialectSGLang, ContentOpenAI,
			`[{"role":"tool","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`,
			`[{"role": "tool", "content": "a b"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conv, err := NormalizeMessages(json.RawMessage(tc.messages), tc.format, tc.dialect)
			if want, ok := strings.CutPrefix(tc.want, "error: "); ok {
				var me *MessagesError
				if !errors.As(err, &me) || !strings.Contains(err.Error(), want) {
					t.Fatalf("error %v, want a MessagesError with %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := asJSON(t, conv); got != tc.want {
				t.Errorf("\n got  %s\n want %s", got, tc.want)
			}
		})
	}
}

// The request's values are not changed by normalising (the proxy sends
// the body on as it came).
func TestNormalizeMessagesLeavesInputAlone(t *testing.T) {
	raw := `[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}]`
	parsed, err := ParseMessages(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	before := asJSON(t, parsed)
	if _, err := NormalizeMessages(json.RawMessage(raw), ContentString, DialectVLLM); err != nil {
		t.Fatal(err)
	}
	if after := asJSON(t, parsed); after != before {
		t.Errorf("input changed: %s -> %s", before, after)
	}
}

func TestNormalizeTools(t *testing.T) {
	got, err := NormalizeTools(json.RawMessage(`[{"function":{"strict":true,"name":"f"},"type":"function","x":1}]`), DialectVLLM)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"type": "function", "function": {"name": "f", "description": null, "parameters": null, "strict": true}}]`
	if s := asJSON(t, got); s != want {
		t.Errorf("\n got  %s\n want %s", s, want)
	}
	for _, bad := range []string{`[]`, `[{"type":"retrieval","function":{"name":"f"}}]`, `[{"type":"function"}]`, `[{"function":{"name":3}}]`, `{}`} {
		if _, err := NormalizeTools(json.RawMessage(bad), DialectVLLM); err == nil {
			t.Errorf("tools %s: no error", bad)
		}
	}
}

// The content format each engine detects in the golden set's templates:
// only Gemma 3 iterates message content (vLLM's rule); SGLang also takes
// any template that mentions images.
func TestContentFormat(t *testing.T) {
	for _, tc := range []struct {
		model          string
		vllm, sglangCF ContentFormat
	}{
		{"qwen3", ContentString, ContentString},
		{"llama3_1", ContentString, ContentString},
		{"deepseek_v3", ContentString, ContentString},
		{"gemma3", ContentOpenAI, ContentOpenAI},
	} {
		tok := golden(t, tc.model)
		if got := tok.ContentFormat(DialectVLLM); got != tc.vllm {
			t.Errorf("%s vllm: %s, want %s", tc.model, got, tc.vllm)
		}
		if got := tok.ContentFormat(DialectSGLang); got != tc.sglangCF {
			t.Errorf("%s sglang: %s, want %s", tc.model, got, tc.sglangCF)
		}
	}
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{`{% for m in messages %}{% for c in m.content %}{{ c.text }}{% endfor %}{% endfor %}`, true},
		{`{% set loop_messages = messages[1:] %}{% for m in loop_messages %}{% for c in m['content'] | list %}{% endfor %}{% endfor %}`, true},
		{`{% for m in messages %}{{ m.content }}{% endfor %}`, false},
		{`{% for c in message.content %}{% endfor %}`, false}, // message is not a loop over messages
	} {
		tpl, err := jinja.Parse(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := tpl.IteratesMessageContent(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.src, got, tc.want)
		}
	}
}

func FuzzNormalizeMessages(f *testing.F) {
	f.Add(`[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}]`, false, false)
	f.Add(`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}]`, true, true)
	f.Add(`[{"role":"tool","content":[{"type":"text","text":null}]}]`, false, true)
	f.Fuzz(func(t *testing.T, raw string, openai, sglang bool) {
		format, d := ContentString, DialectVLLM
		if openai {
			format = ContentOpenAI
		}
		if sglang {
			d = DialectSGLang
		}
		conv, err := NormalizeMessages(json.RawMessage(raw), format, d)
		if err != nil {
			var me *MessagesError
			if !errors.As(err, &me) {
				t.Fatalf("error %v is not a MessagesError", err)
			}
			return
		}
		for _, m := range conv.Items {
			d := m.(*jinja.Dict)
			if r, _ := d.Get("role"); r == "" {
				t.Fatal("a message without a role")
			}
		}
	})
}
