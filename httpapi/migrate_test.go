package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// sse is one data line of a stream.
func sse(v string) []byte { return []byte("data: " + v + "\n") }

// The proxy relays content lines as they are and holds an engine's error
// event (and its blank line) back: a migration may continue the stream.
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
	if m.generated() != 3 || !m.relayed() {
		t.Fatalf("generated %d relayed %v", m.generated(), m.relayed())
	}
	if got := m.observe(sse(`{"error":{"message":"engine died"}}`)); got != nil {
		t.Fatalf("error event relayed: %q", got)
	}
	if got := m.observe([]byte("\n")); got != nil {
		t.Fatalf("the error event's blank line relayed: %q", got)
	}
	if m.held == nil || m.stream.Done() {
		t.Fatal("error event not held")
	}
	m.held = nil
	if got := m.observe([]byte("\n")); string(got) != "\n" {
		t.Fatalf("a blank line with nothing held was dropped: %q", got)
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

// The proxy's continuation (resume.Stream.Continue, tested there) becomes
// the request's body, routing tokens and expected output; a second one is
// built from the original request, and the continuation's usage counts
// the whole generation.
func TestContinuation(t *testing.T) {
	p, err := continued(t, "/v1/completions", `{"prompt":[1],"max_tokens":10,"stream":true,"echo":true}`, []uint32{1},
		`{"choices":[{"index":0,"text":" a","token_ids":[5]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	p.mig.observe(sse(`{"choices":[{"index":0,"text":" b","token_ids":[6]}]}`))
	if err := p.continuation(); err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(p.body, &f); err != nil {
		t.Fatal(err)
	}
	if pj, _ := json.Marshal(f["prompt"]); string(pj) != "[1,5,6]" || f["max_tokens"] != 8.0 || f["echo"] != false {
		t.Fatalf("second continuation: %s", p.body)
	}
	if len(p.tokens) != 3 || p.maxTokens != 8 || string(p.fields["max_tokens"]) != "8" {
		t.Fatalf("routing tokens %v, expected output %d, fields %v", p.tokens, p.maxTokens, p.fields)
	}
	got := p.mig.observe(sse(`{"id":"x","choices":[],"usage":{"prompt_tokens":13,"completion_tokens":4,"total_tokens":17}}`))
	var c struct {
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(string(got), "data: ")), &c); err != nil {
		t.Fatal(err)
	}
	if c.Usage.Prompt != 11 || c.Usage.Completion != 6 {
		t.Fatalf("usage %+v, want 11 prompt + 6 completion", c.Usage)
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
