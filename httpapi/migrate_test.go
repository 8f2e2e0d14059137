package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// sse is one data line of a stream.
func sse(v string) []byte { return []byte("data: " + v + "\n") }

func TestMigrationObserve(t *testing.T) {
	m := newMigration(3, &proxied{path: "/v1/completions", tokens: []uint32{1, 2}})
	lines := [][]byte{
		sse(`{"choices":[{"index":0,"text":" a","token_ids":[7]}]}`), []byte("\n"),
		sse(`{"choices":[{"index":0,"text":" b","token_ids":[8,9]}]}`), []byte("\n"),
	}
	for _, l := range lines {
		if got := m.observe(l); string(got) != string(l) {
			t.Fatalf("a content line was changed: %q", got)
		}
	}
	if m.text.String() != " a b" || len(m.ids) != 3 || !m.idsOK || m.generated() != 3 || !m.relayed() {
		t.Fatalf("recorded %q %v ok=%v generated=%d", m.text.String(), m.ids, m.idsOK, m.generated())
	}
	// An engine's error event and its blank line are held back.
	if got := m.observe(sse(`{"error":{"message":"engine died"}}`)); got != nil {
		t.Fatalf("error event relayed: %q", got)
	}
	if got := m.observe([]byte("\n")); got != nil {
		t.Fatalf("the error event's blank line relayed: %q", got)
	}
	if m.held == nil || m.sawDone {
		t.Fatal("error event not held")
	}
	m.held = nil
	// A chunk without token ids: ids are no longer complete.
	m.observe(sse(`{"choices":[{"index":0,"text":" c"}]}`))
	if m.idsOK || m.generated() != 4 {
		t.Fatalf("ids ok %v generated %d after a chunk without ids", m.idsOK, m.generated())
	}
	m.observe(sse(`[DONE]`))
	if !m.sawDone {
		t.Fatal("[DONE] not seen")
	}
	// A second choice cannot be continued.
	m.observe(sse(`{"choices":[{"index":1,"text":" z"}]}`))
	if m.unsupported == "" {
		t.Fatal("a second choice was accepted")
	}
}

func TestMigrationChatObserve(t *testing.T) {
	m := newMigration(3, &proxied{path: "/v1/chat/completions"})
	m.observe(sse(`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}`))
	m.observe(sse(`{"choices":[{"index":0,"delta":{"content":"lo"}}]}`))
	if m.text.String() != "Hello" || m.unsupported != "" {
		t.Fatalf("chat text %q unsupported %q", m.text.String(), m.unsupported)
	}
	m.observe(sse(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}`))
	if m.unsupported == "" {
		t.Fatal("a tool call stream was taken as continuable")
	}
}

// continued builds the continuation of a request after the client got
// the given stream lines.
func continued(t *testing.T, path, body string, tokens []uint32, lines ...string) (*proxied, error) {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &fields); err != nil {
		t.Fatal(err)
	}
	p := &proxied{path: path, fields: fields, body: []byte(body), tokens: tokens, maxTokens: 10}
	p.mig = newMigration(3, p)
	for _, l := range lines {
		p.mig.observe(sse(l))
	}
	return p, p.continuation()
}

func fieldsOf(t *testing.T, p *proxied) map[string]any {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal(p.body, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestContinuation(t *testing.T) {
	chunk := func(text string, ids string) string {
		if ids == "" {
			return `{"choices":[{"index":0,"text":"` + text + `"}]}`
		}
		return `{"choices":[{"index":0,"text":"` + text + `","token_ids":` + ids + `}]}`
	}
	tests := []struct {
		name, path, body string
		tokens           []uint32
		lines            []string
		want             map[string]any // fields of the continuation
		wantErr          string
		wantTokens       int // routing tokens of the continuation
	}{
		{
			name: "token-id prompt gets the generated ids", path: "/v1/completions",
			body:   `{"prompt":[1,2,3],"max_tokens":10,"stream":true,"echo":true}`,
			tokens: []uint32{1, 2, 3}, lines: []string{chunk(" a", "[7]"), chunk(" b", "[8]")},
			want:       map[string]any{"prompt": []any{1.0, 2.0, 3.0, 7.0, 8.0}, "max_tokens": 8.0, "echo": false, "stream": true},
			wantTokens: 5,
		},
		{
			name: "text prompt gets the generated text", path: "/v1/completions",
			body:   `{"prompt":"Once","stream":true}`,
			tokens: []uint32{1}, lines: []string{chunk(" upon", ""), chunk(" a", "")},
			want:       map[string]any{"prompt": "Once upon a", "max_tokens": 14.0},
			wantTokens: 1,
		},
		{
			name: "token-id prompt without ids in the chunks", path: "/v1/completions",
			body: `{"prompt":[1,2],"max_tokens":10,"stream":true}`, tokens: []uint32{1, 2},
			lines: []string{chunk(" a", "")}, wantErr: "without token_ids",
		},
		{
			name: "everything generated: only the end was lost", path: "/v1/completions",
			body: `{"prompt":[1],"max_tokens":2,"stream":true}`, tokens: []uint32{1},
			lines: []string{chunk(" a", "[5]"), chunk(" b", "[6]")}, wantErr: errStreamDone.Error(),
		},
		{
			name: "n above one", path: "/v1/completions",
			body: `{"prompt":[1],"n":2,"stream":true}`, tokens: []uint32{1},
			lines: []string{chunk(" a", "[5]")}, wantErr: "n is not 1",
		},
		{
			name: "chat gets an assistant message to continue", path: "/v1/chat/completions",
			body:   `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":5,"stream":true}`,
			tokens: []uint32{1},
			lines:  []string{`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}`},
			want: map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "assistant", "content": "Hel"}},
				"continue_final_message": true, "add_generation_prompt": false, "max_completion_tokens": 4.0},
			wantTokens: 1,
		},
		{
			name: "chat continuing the client's own assistant prefix", path: "/v1/chat/completions",
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
			p, err := continued(t, tt.path, tt.body, tt.tokens, tt.lines...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := fieldsOf(t, p)
			for k, v := range tt.want {
				gj, _ := json.Marshal(got[k])
				wj, _ := json.Marshal(v)
				if string(gj) != string(wj) {
					t.Errorf("%s = %s, want %s", k, gj, wj)
				}
			}
			if len(p.tokens) != tt.wantTokens {
				t.Errorf("routing tokens %d, want %d", len(p.tokens), tt.wantTokens)
			}
		})
	}
}

// A second migration continues from the original request and everything
// relayed since, never from the first continuation (which would repeat
// text in the prompt).
func TestContinuationTwice(t *testing.T) {
	p, err := continued(t, "/v1/completions", `{"prompt":[1],"max_tokens":10,"stream":true}`, []uint32{1},
		`{"choices":[{"index":0,"text":" a","token_ids":[5]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	p.mig.observe(sse(`{"choices":[{"index":0,"text":" b","token_ids":[6]}]}`))
	if err := p.continuation(); err != nil {
		t.Fatal(err)
	}
	f := fieldsOf(t, p)
	if pj, _ := json.Marshal(f["prompt"]); string(pj) != "[1,5,6]" || f["max_tokens"] != 8.0 || p.mig.carried != 2 {
		t.Fatalf("second continuation: prompt %s max_tokens %v carried %d", pj, f["max_tokens"], p.mig.carried)
	}
}

// The continuation's usage counts its carried tokens as prompt; the
// client's usage counts them as completion.
func TestContinuationUsage(t *testing.T) {
	m := &migration{carried: 3}
	got := m.observe(sse(`{"id":"x","choices":[],"usage":{"prompt_tokens":13,"completion_tokens":4,"total_tokens":17}}`))
	var c struct {
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Total      int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(string(got), "data: ")), &c); err != nil {
		t.Fatal(err)
	}
	if c.Usage.Prompt != 10 || c.Usage.Completion != 7 || c.Usage.Total != 17 {
		t.Fatalf("usage %+v, want 10 prompt + 7 completion = 17", c.Usage)
	}
}

// TestMigrationLimitOption: Options' zero value is the flag's default, a
// negative value turns migration off, anything else is the limit.
func TestMigrationLimitOption(t *testing.T) {
	for _, c := range []struct{ opt, want int }{
		{0, DefaultMigrationLimit}, {-1, 0}, {-7, 0}, {1, 1}, {16, 16},
	} {
		if got := migrationLimit(c.opt); got != c.want {
			t.Errorf("MigrationLimit %d: proxy limit %d, want %d", c.opt, got, c.want)
		}
	}
}
