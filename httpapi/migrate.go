package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Request migration, as Dynamo's frontend does it (--migration-limit):
// when the engine serving a proxied request fails, the request moves to
// another worker, routed again without the failed one, up to
// MigrationLimit times.
//
//   - Before any text reached the client (no connection, the connection
//     closed with no answer, a 5xx, a failed decode hop), the request is
//     sent again as it came.
//   - Mid-stream (the stream ended without [DONE], or the engine sent an
//     error event), the stream continues on the new worker from what the
//     client already received: a completion's prompt gets the generated
//     token ids appended (when the prompt was token ids and every chunk
//     carried its token_ids, as vLLM's return_token_ids and the mock
//     engine send them) or the generated text (a text prompt); a chat gets
//     an assistant message holding the generated text, continued with
//     continue_final_message (vLLM's and SGLang's parameter, which renders
//     the message without closing it). max_tokens (and
//     max_completion_tokens) shrink by the tokens already generated, echo
//     is turned off, and the final usage chunk is corrected to count the
//     whole generation. The client's stream is one stream: the held-back
//     error event and the cut are never shown, and no text is sent twice.
//
// Dynamo appends token ids because its frontend tokenizes and its engines
// take ids; an OpenAI engine behind this proxy takes text too, so text is
// the fallback. A request that cannot be continued exactly (n > 1, tool
// calls or reasoning in the stream, a token-id prompt without token ids
// in the chunks) is not migrated mid-stream: its client sees the engine's
// error, as without migration (outcome "unsupported").

// Migration reasons and outcomes (kvrouter_migrations_total).
const (
	migrateUnreachable  = "unreachable"
	migrateEngineError  = "engine_error"
	migrateStreamCut    = "stream_cut"
	migrateDecodeFailed = "decode_failed"

	migrated           = "migrated"
	migrateLimit       = "limit"
	migrateUnsupported = "unsupported"
	migrateNoWorker    = "no_worker"
)

// defaultCompletionMaxTokens is OpenAI's (and vLLM's) max_tokens of a
// completion that sets none: a continuation states what is left of it.
const defaultCompletionMaxTokens = 16

// migration is one proxied request's record of what its client received
// and how often it moved.
type migration struct {
	limit, used int
	chat        bool
	// pending: the reason of the move allowed last, not yet counted.
	pending string
	// headerSent: the client has the answer's status and headers.
	headerSent bool
	// ttftSeen: the first token's latency was observed.
	ttftSeen bool
	// What the client received of choice 0: text, token ids (idsOK while
	// every content chunk carried them) and how many content chunks.
	text   strings.Builder
	ids    []uint32
	idsOK  bool
	chunks int
	// seen counts the tokens received: a chunk's token ids, or one for
	// a chunk without them.
	seen int
	// carried: tokens generated before the last migration (the usage of
	// a continuation counts them as prompt).
	carried int
	// sawDone: the stream ended with [DONE]; held: an engine error event
	// not shown to the client (a migration may continue the stream).
	sawDone bool
	held    []byte
	// unsupported: why the stream cannot be continued ("" when it can).
	unsupported string
	// failed: the last engine error answer not shown to the client.
	failed *failedAnswer
	// The request as the client sent it (with the proxy's additions):
	// every continuation is built from it and everything relayed since.
	fields map[string]json.RawMessage
	tokens []uint32
}

// DefaultMigrationLimit is Options.MigrationLimit's default, the default
// of --migration-limit.
const DefaultMigrationLimit = 3

// migrationLimit is Options.MigrationLimit as the proxy counts it: 0 is
// the default, a negative value no migration at all.
func migrationLimit(opt int) int {
	switch {
	case opt == 0:
		return DefaultMigrationLimit
	case opt < 0:
		return 0
	}
	return opt
}

func newMigration(limit int, p *proxied) *migration {
	return &migration{limit: limit, chat: p.path == "/v1/chat/completions", idsOK: true, fields: p.fields, tokens: p.tokens}
}

// relayed reports whether the client has received any generated text.
func (m *migration) relayed() bool { return m.chunks > 0 }

// generated is how many tokens the client has received (exact when the
// chunks carry token ids; one per chunk otherwise, as engines stream).
func (m *migration) generated() int { return m.seen }

// count records a migration decision.
func (s *Server) countMigration(reason, outcome string) {
	if s.opts.Metrics != nil {
		s.opts.Metrics.Migrations.WithLabelValues(reason, outcome).Inc()
	}
}

// allow decides whether the request may move once more. A refusal is
// counted here; a move once the next attempt found a worker or not
// (moved).
func (m *migration) allow(s *Server, reason string) bool {
	outcome := ""
	switch {
	case m.used >= m.limit:
		outcome = migrateLimit
	case reason == migrateStreamCut && m.unsupported != "":
		outcome = migrateUnsupported
	}
	if outcome != "" {
		s.countMigration(reason, outcome)
		return false
	}
	m.used++
	m.pending = reason
	return true
}

// moved counts the move allowed last, once its attempt has been made:
// migrated, or no_worker when no other worker could be routed to.
func (m *migration) moved(s *Server, noWorker bool) {
	if m.pending == "" {
		return
	}
	outcome := migrated
	if noWorker {
		outcome = migrateNoWorker
	}
	s.countMigration(m.pending, outcome)
	m.pending = ""
}

// streamChunk is the part of an OpenAI stream chunk migration reads.
type streamChunk struct {
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Index    int             `json:"index"`
		Text     *string         `json:"text"`
		TokenIDs []uint32        `json:"token_ids"`
		Delta    json.RawMessage `json:"delta"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
}

type chatDelta struct {
	Role             string          `json:"role"`
	Content          *string         `json:"content"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
	Reasoning        json.RawMessage `json:"reasoning_content"`
	ReasoningAlias   json.RawMessage `json:"reasoning"`
	FunctionCallLike json.RawMessage `json:"function_call"`
}

// observe reads one SSE line of the answer on its way to the client. It
// returns the line to send instead (nil: send nothing).
func (m *migration) observe(line []byte) []byte {
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
	if !ok {
		if m.held != nil && len(bytes.TrimSpace(line)) == 0 {
			return nil // the held event's blank line
		}
		return line
	}
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("[DONE]")) {
		m.sawDone = true
		return line
	}
	var c streamChunk
	if json.Unmarshal(data, &c) != nil {
		m.unsupported = "malformed chunk"
		return line
	}
	if present(c.Error) {
		m.held = slices.Clone(line)
		return nil
	}
	if len(c.Choices) == 0 {
		if m.carried > 0 && present(c.Usage) {
			return m.fixUsage(data, line)
		}
		return line
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			m.unsupported = "more than one choice"
			return line
		}
		m.chunks++
		m.seen += max(len(ch.TokenIDs), 1)
		if m.chat {
			m.chatDelta(ch.Delta)
			continue
		}
		if ch.Text != nil {
			m.text.WriteString(*ch.Text)
		}
		if ch.TokenIDs == nil {
			m.idsOK = false
		}
		m.ids = append(m.ids, ch.TokenIDs...)
	}
	return line
}

func (m *migration) chatDelta(raw json.RawMessage) {
	if !present(raw) {
		return
	}
	var d chatDelta
	if json.Unmarshal(raw, &d) != nil {
		m.unsupported = "malformed delta"
		return
	}
	if present(d.ToolCalls) || present(d.Reasoning) || present(d.ReasoningAlias) || present(d.FunctionCallLike) {
		m.unsupported = "tool calls or reasoning in the stream"
	}
	if d.Content != nil {
		m.text.WriteString(*d.Content)
	}
}

// fixUsage rewrites a continuation's usage chunk to count the whole
// generation: the continuation's prompt included the carried tokens.
func (m *migration) fixUsage(data, line []byte) []byte {
	var chunk map[string]json.RawMessage
	if json.Unmarshal(data, &chunk) != nil {
		return line
	}
	var usage map[string]json.RawMessage
	if json.Unmarshal(chunk["usage"], &usage) != nil {
		return line
	}
	var prompt, completion int
	if json.Unmarshal(usage["prompt_tokens"], &prompt) != nil || json.Unmarshal(usage["completion_tokens"], &completion) != nil {
		return line
	}
	carried := min(m.carried, prompt)
	usage["prompt_tokens"] = json.RawMessage(strconv.Itoa(prompt - carried))
	usage["completion_tokens"] = json.RawMessage(strconv.Itoa(completion + carried))
	u, err := json.Marshal(usage)
	if err != nil {
		return line
	}
	chunk["usage"] = u
	out, err := json.Marshal(chunk)
	if err != nil {
		return line
	}
	return append(append([]byte("data: "), out...), '\n')
}

// failedAnswer is an engine's error answer held back while the request
// tries another worker.
type failedAnswer struct {
	status      int
	contentType string
	body        []byte
}

// retryableStatus: an engine answer another engine may do better than
// (HAProxy's retryable 5xx); 508 (a loop) and 501 are final.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// writeFailed answers the client with the engine's held error answer,
// when there is one and nothing was sent yet.
func (m *migration) writeFailed(w http.ResponseWriter) bool {
	if m.failed == nil || m.headerSent {
		return false
	}
	if m.failed.contentType != "" {
		w.Header().Set("Content-Type", m.failed.contentType)
	}
	w.WriteHeader(m.failed.status)
	_, _ = w.Write(m.failed.body)
	m.headerSent = true
	return true
}

// errStreamDone: the cut stream had already generated every token it
// was allowed; only its end was lost.
var errStreamDone = errors.New("the stream had generated all its tokens")

// continuation rewrites the request to continue on another worker from
// what the client received; it updates the body, fields, routing tokens
// and expected output of p.
func (p *proxied) continuation() error {
	m := p.mig
	if m.unsupported != "" {
		return errors.New(m.unsupported)
	}
	f := maps.Clone(m.fields)
	n := m.generated()
	if raw, ok := f["n"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("1")) && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return errors.New("n is not 1")
	}
	// Tokens left to generate.
	left, limited := 0, false
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		raw, ok := f[k]
		if !ok || !present(raw) {
			continue
		}
		var limit int
		if err := json.Unmarshal(raw, &limit); err != nil {
			return errors.New(k + " is not an integer")
		}
		left, limited = limit-n, true
		f[k] = json.RawMessage(strconv.Itoa(max(left, 1)))
	}
	if !limited && !m.chat {
		left, limited = defaultCompletionMaxTokens-n, true
		f["max_tokens"] = json.RawMessage(strconv.Itoa(max(left, 1)))
	}
	if limited && left <= 0 {
		return errStreamDone
	}
	tokens := m.tokens
	if m.chat {
		if err := continueChat(f, m.text.String()); err != nil {
			return err
		}
	} else {
		var err error
		if tokens, err = continuePrompt(f, m.tokens, m); err != nil {
			return err
		}
		f["echo"] = json.RawMessage("false")
	}
	body, err := json.Marshal(f)
	if err != nil {
		return err
	}
	p.fields, p.body, p.tokens = f, body, tokens
	if limited {
		p.maxTokens = uint64(left)
	}
	m.carried = n
	return nil
}

// continuePrompt extends a completion's prompt by what was generated:
// token ids after token ids, text after text. It returns the routing
// tokens of the continued request.
func continuePrompt(f map[string]json.RawMessage, tokens []uint32, m *migration) ([]uint32, error) {
	raw := f["prompt"]
	if text, isText, err := textPrompt(raw); err != nil {
		return nil, err
	} else if isText {
		if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
			return nil, errors.New("a list of text prompts")
		}
		b, err := json.Marshal(text + m.text.String())
		if err != nil {
			return nil, err
		}
		f["prompt"] = b
		return tokens, nil
	}
	if !m.idsOK {
		return nil, errors.New("a token-id prompt and chunks without token_ids")
	}
	ids := append(slices.Clone(tokens), m.ids...)
	b, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	f["prompt"] = b
	return ids, nil
}

// continueChat adds the generated text as an assistant message to
// continue (or extends the assistant message the client asked to
// continue).
func continueChat(f map[string]json.RawMessage, text string) error {
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(f["messages"], &msgs); err != nil || len(msgs) == 0 {
		return errors.New("messages are not a list of objects")
	}
	var cont bool
	if raw, ok := f["continue_final_message"]; ok && present(raw) {
		if err := json.Unmarshal(raw, &cont); err != nil {
			return errors.New("continue_final_message is not a boolean")
		}
	}
	if cont {
		last := msgs[len(msgs)-1]
		var prev string
		if err := json.Unmarshal(last["content"], &prev); err != nil {
			return errors.New("the message to continue has no text content")
		}
		text = prev + text
		msgs = msgs[:len(msgs)-1]
	}
	content, err := json.Marshal(text)
	if err != nil {
		return err
	}
	msgs = append(msgs, map[string]json.RawMessage{"role": json.RawMessage(`"assistant"`), "content": content})
	b, err := json.Marshal(msgs)
	if err != nil {
		return err
	}
	f["messages"] = b
	f["continue_final_message"] = json.RawMessage("true")
	f["add_generation_prompt"] = json.RawMessage("false")
	return nil
}

// endStream ends a stream the proxy could not continue: the engine's
// held error event (or one of its own), without [DONE], so the client
// knows the answer is cut short.
func (p *proxied) endStream(w http.ResponseWriter, why string) {
	m := p.mig
	ev := m.held
	if ev == nil {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{
			"message": "the engine failed mid-stream and the request could not move to another worker: " + why,
			"type":    "server_error", "code": http.StatusBadGateway,
		}})
		ev = append(append([]byte("data: "), b...), '\n')
	}
	_, _ = w.Write(ev)
	_, _ = w.Write([]byte("\n"))
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}
