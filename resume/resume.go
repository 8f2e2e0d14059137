// Package resume is the one rule by which an OpenAI stream cut
// mid-answer goes on elsewhere with no text lost or sent twice. The
// router's proxy uses it when the engine under a stream fails (request
// migration, httpapi/migrate.go); a client uses it when the connection
// carrying its stream dies with a router replica (kvbench load, the
// client advice in docs/operations.md, "Retries").
//
// A Stream reads the answer's SSE lines as they reach the client and
// records what choice 0 received: the text, the token ids (while every
// chunk carries them, as vLLM's return_token_ids and the mock engine
// send them) and how many tokens. Continue then builds the request that
// continues it:
//
//   - a completion's prompt gets the generated token ids appended (a
//     token-id prompt) or the generated text (a text prompt), and echo is
//     turned off;
//   - a chat gets an assistant message holding the generated text (or the
//     client's own final assistant message, extended), with
//     continue_final_message (vLLM's and SGLang's parameter, which
//     renders the message without closing it) and no generation prompt;
//   - max_tokens and max_completion_tokens shrink by the tokens already
//     generated (a completion without either had OpenAI's default, 16).
//
// Every continuation is built from the request as first sent and all
// text received since, so a stream cut twice never repeats text in its
// prompt. A continuation's usage counts the carried tokens as prompt;
// FixUsage moves them back to the completion. What cannot be continued
// exactly (n > 1, tool calls or reasoning in the stream, a token-id
// prompt whose chunks carry no token ids) is refused with the reason.
package resume

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// DefaultCompletionMaxTokens is OpenAI's (and vLLM's) max_tokens of a
// completion that sets none: a continuation states what is left of it.
const DefaultCompletionMaxTokens = 16

// ErrDone: the cut stream had already generated every token it was
// allowed; only its end was lost, and there is nothing to continue.
var ErrDone = errors.New("the stream had generated all its tokens")

// Kind is what one line of a stream was.
type Kind uint8

const (
	// Other: a blank line, a comment, an event name, or a data chunk
	// with neither choices nor usage.
	Other Kind = iota
	// Content: a chunk with choices (generated text).
	Content
	// Done: the stream's end, "data: [DONE]".
	Done
	// Error: an error event (the engine or the router gave up).
	Error
	// Usage: the usage chunk (no choices).
	Usage
)

// Stream is one streamed request's record of what its client received.
// It is not safe for concurrent use.
type Stream struct {
	chat bool
	// The request as first sent, and its prompt's token ids (routing
	// tokens: a text prompt's, or nil, stay as they are).
	fields map[string]json.RawMessage
	tokens []uint32

	text  strings.Builder
	ids   []uint32
	idsOK bool
	// chunks counts content chunks; seen counts tokens (a chunk's token
	// ids, or one for a chunk without them, as engines stream).
	chunks, seen int
	// carried: tokens generated before the last continuation.
	carried     int
	done        bool
	unsupported string
}

// New starts the record of a stream: chat for /v1/chat/completions,
// fields the request body's top-level fields as sent, tokens its
// prompt's token ids (nil when unknown). fields is not modified.
func New(chat bool, fields map[string]json.RawMessage, tokens []uint32) *Stream {
	return &Stream{chat: chat, fields: fields, tokens: tokens, idsOK: true}
}

// Relayed reports whether the client received any generated text (a
// stream cut before it is sent again as it was).
func (s *Stream) Relayed() bool { return s.chunks > 0 }

// Generated is how many tokens the client received (exact when the
// chunks carry token ids; one per chunk otherwise).
func (s *Stream) Generated() int { return s.seen }

// Done reports whether the stream's [DONE] was received.
func (s *Stream) Done() bool { return s.done }

// Text is the text of choice 0 received so far.
func (s *Stream) Text() string { return s.text.String() }

// Carried is how many tokens the last continuation carried in its prompt.
func (s *Stream) Carried() int { return s.carried }

// Unsupported is why the stream cannot be continued ("" when it can).
func (s *Stream) Unsupported() string { return s.unsupported }

// Refuse marks the stream as one that cannot be continued, for why.
func (s *Stream) Refuse(why string) { s.unsupported = why }

// chunk is the part of an OpenAI stream chunk the record reads.
type chunk struct {
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
	Content          *string         `json:"content"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
	Reasoning        json.RawMessage `json:"reasoning_content"`
	ReasoningAlias   json.RawMessage `json:"reasoning"`
	FunctionCallLike json.RawMessage `json:"function_call"`
}

// Observe records one SSE line (with or without its line end) as the
// client receives it and says what it was.
func (s *Stream) Observe(line []byte) Kind {
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
	if !ok {
		return Other
	}
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("[DONE]")) {
		s.done = true
		return Done
	}
	var c chunk
	if json.Unmarshal(data, &c) != nil {
		s.unsupported = "malformed chunk"
		return Other
	}
	if Present(c.Error) {
		return Error
	}
	if len(c.Choices) == 0 {
		if Present(c.Usage) {
			return Usage
		}
		return Other
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			s.unsupported = "more than one choice"
			return Content
		}
		s.chunks++
		s.seen += max(len(ch.TokenIDs), 1)
		if s.chat {
			s.chatDelta(ch.Delta)
			continue
		}
		if ch.Text != nil {
			s.text.WriteString(*ch.Text)
		}
		if ch.TokenIDs == nil {
			s.idsOK = false
		}
		s.ids = append(s.ids, ch.TokenIDs...)
	}
	return Content
}

func (s *Stream) chatDelta(raw json.RawMessage) {
	if !Present(raw) {
		return
	}
	var d chatDelta
	if json.Unmarshal(raw, &d) != nil {
		s.unsupported = "malformed delta"
		return
	}
	if Present(d.ToolCalls) || Present(d.Reasoning) || Present(d.ReasoningAlias) || Present(d.FunctionCallLike) {
		s.unsupported = "tool calls or reasoning in the stream"
	}
	if d.Content != nil {
		s.text.WriteString(*d.Content)
	}
}

// FixUsage rewrites a continuation's usage line to count the whole
// generation (the continuation's prompt included the carried tokens).
// A line it cannot read, or any line before a continuation, is returned
// as it is.
func (s *Stream) FixUsage(line []byte) []byte {
	if s.carried == 0 {
		return line
	}
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
	if !ok {
		return line
	}
	var c map[string]json.RawMessage
	if json.Unmarshal(data, &c) != nil {
		return line
	}
	var usage map[string]json.RawMessage
	if json.Unmarshal(c["usage"], &usage) != nil {
		return line
	}
	var prompt, completion int
	if json.Unmarshal(usage["prompt_tokens"], &prompt) != nil || json.Unmarshal(usage["completion_tokens"], &completion) != nil {
		return line
	}
	carried := min(s.carried, prompt)
	usage["prompt_tokens"] = json.RawMessage(strconv.Itoa(prompt - carried))
	usage["completion_tokens"] = json.RawMessage(strconv.Itoa(completion + carried))
	u, err := json.Marshal(usage)
	if err != nil {
		return line
	}
	c["usage"] = u
	out, err := json.Marshal(c)
	if err != nil {
		return line
	}
	return append(append([]byte("data: "), out...), '\n')
}

// Request is a continuation: the request that goes on from what the
// client received.
type Request struct {
	// Fields and Body are the continuation's body.
	Fields map[string]json.RawMessage
	Body   []byte
	// Tokens are its prompt's token ids (the generated ids appended to a
	// token-id prompt; the first request's tokens otherwise).
	Tokens []uint32
	// Left is how many tokens it may generate, when Limited.
	Left    int
	Limited bool
}

// Continue builds the continuation of the stream from the request as
// first sent and everything received since. ErrDone: nothing is left to
// generate. After it, FixUsage counts the carried tokens.
func (s *Stream) Continue() (Request, error) {
	if s.unsupported != "" {
		return Request{}, errors.New(s.unsupported)
	}
	f := maps.Clone(s.fields)
	n := s.Generated()
	if raw, ok := f["n"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("1")) && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return Request{}, errors.New("n is not 1")
	}
	left, limited := 0, false
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		raw, ok := f[k]
		if !ok || !Present(raw) {
			continue
		}
		var limit int
		if err := json.Unmarshal(raw, &limit); err != nil {
			return Request{}, errors.New(k + " is not an integer")
		}
		left, limited = limit-n, true
		f[k] = json.RawMessage(strconv.Itoa(max(left, 1)))
	}
	if !limited && !s.chat {
		left, limited = DefaultCompletionMaxTokens-n, true
		f["max_tokens"] = json.RawMessage(strconv.Itoa(max(left, 1)))
	}
	if limited && left <= 0 {
		return Request{}, ErrDone
	}
	tokens := s.tokens
	if s.chat {
		if err := continueChat(f, s.text.String()); err != nil {
			return Request{}, err
		}
	} else {
		var err error
		if tokens, err = s.continuePrompt(f); err != nil {
			return Request{}, err
		}
		f["echo"] = json.RawMessage("false")
	}
	body, err := json.Marshal(f)
	if err != nil {
		return Request{}, err
	}
	s.carried = n
	return Request{Fields: f, Body: body, Tokens: tokens, Left: left, Limited: limited}, nil
}

// continuePrompt extends a completion's prompt by what was generated:
// token ids after token ids, text after text. It returns the token ids
// of the continued prompt.
func (s *Stream) continuePrompt(f map[string]json.RawMessage) ([]uint32, error) {
	raw := bytes.TrimSpace(f["prompt"])
	if len(raw) > 0 && raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, errors.New("prompt is not a string")
		}
		b, err := json.Marshal(text + s.text.String())
		if err != nil {
			return nil, err
		}
		f["prompt"] = b
		return s.tokens, nil
	}
	if len(raw) > 0 && raw[0] == '[' {
		if rest := bytes.TrimSpace(raw[1:]); len(rest) > 0 && rest[0] == '"' {
			return nil, errors.New("a list of text prompts")
		}
	}
	if !s.idsOK {
		return nil, errors.New("a token-id prompt and chunks without token_ids")
	}
	prompt := s.tokens
	if prompt == nil {
		if err := json.Unmarshal(raw, &prompt); err != nil {
			return nil, errors.New("prompt is neither text nor token ids")
		}
	}
	ids := append(slices.Clone(prompt), s.ids...)
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
	if raw, ok := f["continue_final_message"]; ok && Present(raw) {
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

// Present reports whether a JSON field holds a value other than null.
func Present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null"))
}
