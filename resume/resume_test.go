package resume

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// sse is one data line of a stream.
func sse(v string) []byte { return []byte("data: " + v + "\n") }

func TestObserve(t *testing.T) {
	s := New(false, nil, []uint32{1, 2})
	tests := []struct {
		line string
		want Kind
	}{
		{`data: {"choices":[{"index":0,"text":" a","token_ids":[7]}]}`, Content},
		{"", Other},
		{": keep-alive", Other},
		{`data: {"choices":[{"index":0,"text":" b","token_ids":[8,9]}]}`, Content},
		{`data: {"id":"x","choices":[]}`, Other},
		{`data: {"error":{"message":"engine died"}}`, Error},
		{`data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":3}}`, Usage},
	}
	for _, tt := range tests {
		if got := s.Observe([]byte(tt.line + "\n")); got != tt.want {
			t.Fatalf("%q: kind %d, want %d", tt.line, got, tt.want)
		}
	}
	if s.Text() != " a b" || len(s.ids) != 3 || !s.idsOK || s.Generated() != 3 || !s.Relayed() || s.Done() {
		t.Fatalf("recorded %q %v ok=%v generated=%d done=%v", s.Text(), s.ids, s.idsOK, s.Generated(), s.Done())
	}
	// A chunk without token ids: ids are no longer complete.
	s.Observe(sse(`{"choices":[{"index":0,"text":" c"}]}`))
	if s.idsOK || s.Generated() != 4 {
		t.Fatalf("ids ok %v generated %d after a chunk without ids", s.idsOK, s.Generated())
	}
	if s.Observe(sse(`[DONE]`)) != Done || !s.Done() {
		t.Fatal("[DONE] not seen")
	}
	// A second choice cannot be continued.
	s.Observe(sse(`{"choices":[{"index":1,"text":" z"}]}`))
	if s.Unsupported() == "" {
		t.Fatal("a second choice was accepted")
	}
}

func TestChatObserve(t *testing.T) {
	s := New(true, nil, nil)
	s.Observe(sse(`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}`))
	s.Observe(sse(`{"choices":[{"index":0,"delta":{"content":"lo"}}]}`))
	if s.Text() != "Hello" || s.Unsupported() != "" {
		t.Fatalf("chat text %q unsupported %q", s.Text(), s.Unsupported())
	}
	s.Observe(sse(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}`))
	if s.Unsupported() == "" {
		t.Fatal("a tool call stream was taken as continuable")
	}
}

// continued builds the continuation of a request after the client got
// the given stream lines.
func continued(t *testing.T, chat bool, body string, tokens []uint32, lines ...string) (*Stream, Request, error) {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &fields); err != nil {
		t.Fatal(err)
	}
	s := New(chat, fields, tokens)
	for _, l := range lines {
		s.Observe(sse(l))
	}
	c, err := s.Continue()
	return s, c, err
}

func fieldsOf(t *testing.T, c Request) map[string]any {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal(c.Body, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestContinue(t *testing.T) {
	chunk := func(text string, ids string) string {
		if ids == "" {
			return `{"choices":[{"index":0,"text":"` + text + `"}]}`
		}
		return `{"choices":[{"index":0,"text":"` + text + `","token_ids":` + ids + `}]}`
	}
	tests := []struct {
		name       string
		chat       bool
		body       string
		tokens     []uint32
		lines      []string
		want       map[string]any // fields of the continuation
		wantErr    string
		wantTokens int // prompt tokens of the continuation
		wantLeft   int
	}{
		{
			name:   "token-id prompt gets the generated ids",
			body:   `{"prompt":[1,2,3],"max_tokens":10,"stream":true,"echo":true}`,
			tokens: []uint32{1, 2, 3}, lines: []string{chunk(" a", "[7]"), chunk(" b", "[8]")},
			want:       map[string]any{"prompt": []any{1.0, 2.0, 3.0, 7.0, 8.0}, "max_tokens": 8.0, "echo": false, "stream": true},
			wantTokens: 5, wantLeft: 8,
		},
		{
			name:  "token-id prompt read from the body when no tokens are given",
			body:  `{"prompt":[1,2],"max_tokens":4,"stream":true}`,
			lines: []string{chunk(" a", "[7]")},
			want:  map[string]any{"prompt": []any{1.0, 2.0, 7.0}, "max_tokens": 3.0}, wantTokens: 3, wantLeft: 3,
		},
		{
			name:   "text prompt gets the generated text",
			body:   `{"prompt":"Once","stream":true}`,
			tokens: []uint32{1}, lines: []string{chunk(" upon", ""), chunk(" a", "")},
			want:       map[string]any{"prompt": "Once upon a", "max_tokens": 14.0},
			wantTokens: 1, wantLeft: 14,
		},
		{
			name: "a list of text prompts", body: `{"prompt":["a"],"stream":true}`,
			lines: []string{chunk(" a", "")}, wantErr: "list of text prompts",
		},
		{
			name: "token-id prompt without ids in the chunks",
			body: `{"prompt":[1,2],"max_tokens":10,"stream":true}`, tokens: []uint32{1, 2},
			lines: []string{chunk(" a", "")}, wantErr: "without token_ids",
		},
		{
			name: "everything generated: only the end was lost",
			body: `{"prompt":[1],"max_tokens":2,"stream":true}`, tokens: []uint32{1},
			lines: []string{chunk(" a", "[5]"), chunk(" b", "[6]")}, wantErr: ErrDone.Error(),
		},
		{
			name: "n above one",
			body: `{"prompt":[1],"n":2,"stream":true}`, tokens: []uint32{1},
			lines: []string{chunk(" a", "[5]")}, wantErr: "n is not 1",
		},
		{
			name: "chat gets an assistant message to continue", chat: true,
			body:   `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":5,"stream":true}`,
			tokens: []uint32{1},
			lines:  []string{`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}`},
			want: map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "assistant", "content": "Hel"}},
				"continue_final_message": true, "add_generation_prompt": false, "max_completion_tokens": 4.0},
			wantTokens: 1, wantLeft: 4,
		},
		{
			name: "chat continuing the client's own assistant prefix", chat: true,
			body:   `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure: "}],"continue_final_message":true,"stream":true}`,
			tokens: []uint32{1},
			lines:  []string{`{"choices":[{"index":0,"delta":{"content":"yes"}}]}`},
			want: map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "assistant", "content": "Sure: yes"}},
				"continue_final_message": true},
			wantTokens: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c, err := continued(t, tt.chat, tt.body, tt.tokens, tt.lines...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := fieldsOf(t, c)
			for k, v := range tt.want {
				gj, _ := json.Marshal(got[k])
				wj, _ := json.Marshal(v)
				if string(gj) != string(wj) {
					t.Errorf("%s = %s, want %s", k, gj, wj)
				}
			}
			if len(c.Tokens) != tt.wantTokens {
				t.Errorf("prompt tokens %d, want %d", len(c.Tokens), tt.wantTokens)
			}
			if c.Left != tt.wantLeft {
				t.Errorf("left %d, want %d", c.Left, tt.wantLeft)
			}
		})
	}
}

// A second continuation is built from the original request and
// everything received since, never from the first continuation (which
// would repeat text in the prompt); the first request's fields are left
// as they were.
func TestContinueTwice(t *testing.T) {
	body := `{"prompt":[1],"max_tokens":10,"stream":true}`
	s, _, err := continued(t, false, body, []uint32{1}, `{"choices":[{"index":0,"text":" a","token_ids":[5]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	s.Observe(sse(`{"choices":[{"index":0,"text":" b","token_ids":[6]}]}`))
	c, err := s.Continue()
	if err != nil {
		t.Fatal(err)
	}
	f := fieldsOf(t, c)
	if pj, _ := json.Marshal(f["prompt"]); string(pj) != "[1,5,6]" || f["max_tokens"] != 8.0 || s.Carried() != 2 {
		t.Fatalf("second continuation: prompt %s max_tokens %v carried %d", pj, f["max_tokens"], s.Carried())
	}
	if string(s.fields["prompt"]) != "[1]" {
		t.Fatalf("the first request's prompt became %s", s.fields["prompt"])
	}
}

// The continuation's usage counts its carried tokens as prompt; the
// client's usage counts them as completion. Before a continuation the
// usage line is left alone.
func TestFixUsage(t *testing.T) {
	line := sse(`{"id":"x","choices":[],"usage":{"prompt_tokens":13,"completion_tokens":4,"total_tokens":17}}`)
	s := New(false, nil, nil)
	if got := s.FixUsage(line); string(got) != string(line) {
		t.Fatalf("usage changed before any continuation: %s", got)
	}
	s.carried = 3
	var c struct {
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Total      int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(string(s.FixUsage(line)), "data: ")), &c); err != nil {
		t.Fatal(err)
	}
	if c.Usage.Prompt != 10 || c.Usage.Completion != 7 || c.Usage.Total != 17 {
		t.Fatalf("usage %+v, want 10 prompt + 7 completion = 17", c.Usage)
	}
}

func TestContinueRefused(t *testing.T) {
	_, _, err := continued(t, false, `{"prompt":[1],"max_tokens":4}`, nil, `{"choices":[{"index":0,"text":" a","token_ids":[5]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	s := New(false, map[string]json.RawMessage{"prompt": json.RawMessage("[1]")}, nil)
	s.Observe(sse(`{"choices":[{"index":0,"text":" a","token_ids":[5]}]}`))
	s.Refuse("the continuation was refused: 400")
	if _, err := s.Continue(); err == nil || errors.Is(err, ErrDone) || !strings.Contains(err.Error(), "400") {
		t.Fatalf("a refused stream continued: %v", err)
	}
}
