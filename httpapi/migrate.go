package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/kvrouter/kvrouter/resume"
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

// migration is one proxied request's record of what its client received
// (resume.Stream: the continuation rule clients share) and how often it
// moved.
type migration struct {
	limit, used int
	// pending: the reason of the move allowed last, not yet counted.
	pending string
	// headerSent: the client has the answer's status and headers.
	headerSent bool
	// ttftSeen: the first token's latency was observed.
	ttftSeen bool
	// stream: what the client received of choice 0, and the request as
	// the client sent it (with the proxy's additions): every
	// continuation is built from it and everything relayed since.
	stream *resume.Stream
	// held: an engine error event not shown to the client (a migration
	// may continue the stream).
	held []byte
	// failed: the last engine error answer not shown to the client.
	failed *failedAnswer
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
	return &migration{limit: limit, stream: resume.New(p.path == "/v1/chat/completions", p.fields, p.tokens)}
}

// relayed reports whether the client has received any generated text.
func (m *migration) relayed() bool { return m.stream.Relayed() }

// generated is how many tokens the client has received.
func (m *migration) generated() int { return m.stream.Generated() }

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
	case reason == migrateStreamCut && m.stream.Unsupported() != "":
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

// observe reads one SSE line of the answer on its way to the client. It
// returns the line to send instead (nil: send nothing): an engine's error
// event and its blank line are held back, a continuation's usage counts
// the whole generation.
func (m *migration) observe(line []byte) []byte {
	switch m.stream.Observe(line) {
	case resume.Error:
		m.held = slices.Clone(line)
		return nil
	case resume.Usage:
		return m.stream.FixUsage(line)
	case resume.Other:
		if m.held != nil && len(bytes.TrimSpace(line)) == 0 {
			return nil // the held event's blank line
		}
	}
	return line
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

// continuation rewrites the request to continue on another worker from
// what the client received (resume.Stream.Continue); it updates the body,
// fields, routing tokens and expected output of p. resume.ErrDone: only
// the stream's end was lost.
func (p *proxied) continuation() error {
	c, err := p.mig.stream.Continue()
	if err != nil {
		return err
	}
	p.fields, p.body, p.tokens = c.Fields, c.Body, c.Tokens
	if c.Limited {
		p.maxTokens = uint64(c.Left)
	}
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
