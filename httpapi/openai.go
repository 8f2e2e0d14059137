package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/parity"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// Text and chat prompts: the router tokenizes them only to route (with the
// served model's own tokenizer and chat template, exactly as the engine
// does); the worker receives the client's body unchanged and applies its
// own template.

var errNoTokenizer = errors.New("text and chat prompts need a tokenizer: start kvrouter with --tokenizer PATH or --served-model NAME=PATH (token-id prompts need none)")

// inputError is a request the client must fix (HTTP 400). counted: the
// refusal was already counted and logged where it was found (a prompt
// over max-prompt-tokens), so writeInputError does not count it again.
type inputError struct {
	msg     string
	counted bool
}

func (e *inputError) Error() string { return e.msg }

func badInput(format string, args ...any) error {
	return &inputError{msg: fmt.Sprintf(format, args...)}
}

// textInput is what a request may carry instead of token ids: a text
// prompt, or chat messages (with tools and template options), and the
// model that picks the tokenizer.
type textInput struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	Documents           json.RawMessage `json:"documents"`
	ChatTemplate        string          `json:"chat_template"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	AddSpecialTokens    *bool           `json:"add_special_tokens"`
	// ContinueFinalMessage and ReasoningEffort change the render (vLLM's
	// chat request fields of those names).
	ContinueFinalMessage *bool   `json:"continue_final_message"`
	ReasoningEffort      *string `json:"reasoning_effort"`
}

func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// isChat reports whether the input carries messages.
func (in *textInput) isChat() bool { return present(in.Messages) }

// hasText reports whether the input carries a text prompt or messages.
func (in *textInput) hasText() bool { return in.isChat() || present(in.Prompt) }

// textPrompt reads a prompt given as a string or a list of one string
// (ok false: not text, e.g. token ids).
func textPrompt(raw json.RawMessage) (string, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false, badInput("prompt: %v", err)
		}
		return s, true, nil
	}
	if raw[0] == '[' {
		rest := bytes.TrimSpace(raw[1:])
		if len(rest) > 0 && rest[0] == '"' {
			var list []string
			if err := json.Unmarshal(raw, &list); err != nil {
				return "", false, badInput("prompt must be a string, a list of one string, or token ids")
			}
			if len(list) != 1 {
				return "", false, badInput("prompt holds %d strings: the router routes one prompt per request", len(list))
			}
			return list[0], true, nil
		}
	}
	return "", false, nil
}

// checkUTF8 refuses fields that are not valid UTF-8 (JSON decoding would
// replace the bad bytes, and the engine would see other text).
func checkUTF8(fields ...json.RawMessage) error {
	for _, f := range fields {
		if !utf8.Valid(f) {
			return badInput("request text is not valid UTF-8")
		}
	}
	return nil
}

// tokenizeInput returns the token ids of a text prompt or chat messages
// and the model that tokenized them. Chat: the model's template renders
// the messages (add_generation_prompt defaults to true) and the prompt is
// encoded without the post-processor's special tokens (the template
// placed them), as vLLM does; a text prompt is encoded with them
// (add_special_tokens defaults to true).
func (s *Server) tokenizeInput(ctx context.Context, in *textInput) ([]uint32, *servedModel, error) {
	if err := checkUTF8(in.Prompt, in.Messages, in.Tools, in.Documents, in.ChatTemplateKwargs); err != nil {
		return nil, nil, err
	}
	if !utf8.ValidString(in.Model) || !utf8.ValidString(in.ChatTemplate) {
		return nil, nil, badInput("request text is not valid UTF-8")
	}
	m, err := s.opts.Models.resolve(in.Model)
	if err != nil {
		return nil, nil, err
	}
	if in.ChatTemplate != "" && !s.opts.TrustRequestChatTemplate {
		return nil, nil, badInput("chat_template in a request is refused: the router renders the model's own template (as vLLM without --trust-request-chat-template)")
	}
	var ids []uint32
	if in.isChat() {
		chat := tokenizer.Chat{
			Messages: in.Messages, Tools: in.Tools, Documents: in.Documents, Kwargs: in.ChatTemplateKwargs,
			AddGenerationPrompt: in.AddGenerationPrompt == nil || *in.AddGenerationPrompt, Template: in.ChatTemplate,
			ContinueFinalMessage: in.ContinueFinalMessage != nil && *in.ContinueFinalMessage,
			Dialect:              m.dialect,
		}
		if in.ReasoningEffort != nil {
			chat.ReasoningEffort = *in.ReasoningEffort
		}
		special := in.AddSpecialTokens != nil && *in.AddSpecialTokens
		if eng := s.engineFor(ctx, m); eng != nil {
			ids, err = eng.tokenizeChat(ctx, m, chat, special)
		} else if m.tok == nil {
			err = errNoTokenizer
		} else {
			ids, err = s.withTokenSlot(ctx, func() ([]uint32, error) {
				prompt, err := m.tok.RenderChat(chat)
				if err != nil {
					return nil, err
				}
				return m.tok.EncodeLimit(prompt, special, s.promptTokenLimit())
			})
		}
	} else {
		text, ok, perr := textPrompt(in.Prompt)
		if perr != nil {
			return nil, nil, perr
		}
		if !ok {
			return nil, nil, badInput("prompt must be a string or a list of token ids")
		}
		special := in.AddSpecialTokens == nil || *in.AddSpecialTokens
		if eng := s.engineFor(ctx, m); eng != nil {
			ids, err = eng.tokenizeText(ctx, m, text, special)
		} else if m.tok == nil {
			err = errNoTokenizer
		} else {
			ids, err = s.withTokenSlot(ctx, func() ([]uint32, error) {
				return m.tok.EncodeLimit(text, special, s.promptTokenLimit())
			})
		}
	}
	if err != nil {
		return nil, nil, s.limitError(m.name, err)
	}
	if len(ids) == 0 {
		return nil, nil, badInput("prompt is empty: it has no tokens")
	}
	return ids, m, nil
}

// withTokenSlot runs a local tokenization in one of the tokenization
// slots (tokenSlots), waiting for one up to the queue timeout.
func (s *Server) withTokenSlot(ctx context.Context, tokenize func() ([]uint32, error)) ([]uint32, error) {
	release, err := s.tokens.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return tokenize()
}

// writeInputError answers a tokenization failure (inputFailure).
func (s *Server) writeInputError(w http.ResponseWriter, err error) {
	s.inputFailure(err).write(w)
}

// inputFailure is the answer to a tokenization failure: 404 for an
// unknown model (with the served names), 400 for what the client must
// fix, 502/503 for an engine that could not tokenize, 503 with
// Retry-After when every tokenization slot stayed busy. Refusals of the
// client's input are counted and logged here.
func (s *Server) inputFailure(err error) *Failure {
	var unknown *unknownModelError
	var msgs *tokenizer.MessagesError
	var tpl *tokenizer.TemplateError
	var in *inputError
	var eng *engineError
	var busy *busyError
	switch {
	case errors.As(err, &unknown):
		code := http.StatusNotFound
		if unknown.model == "" {
			code = http.StatusBadRequest
		}
		s.inputRefused("unknown_model", err)
		return &Failure{Status: code, Body: map[string]any{"error": err.Error(), "models": unknown.served}, msg: err.Error()}
	case errors.As(err, &msgs), errors.As(err, &tpl), errors.As(err, &in),
		errors.Is(err, tokenizer.ErrNoChatTemplate), errors.Is(err, errNoTokenizer):
		if in == nil || !in.counted {
			s.inputRefused(inputRefusalReason(msgs, tpl, err), err)
		}
		return failure(http.StatusBadRequest, "%v", err)
	case errors.As(err, &eng):
		return failure(eng.status, "%v", err)
	case errors.As(err, &busy):
		if s.opts.Metrics != nil {
			s.opts.Metrics.Tokenize.Busy.Inc()
		}
		if ok, suppressed := s.busyLog.Allow(time.Now()); ok {
			s.log.Warn("refused a prompt: every tokenization slot stayed busy", "slots", busy.slots, "waited", busy.wait, "suppressed", suppressed)
		}
		f := failure(http.StatusServiceUnavailable, "%v", err)
		f.RetryAfter = "1"
		return f
	case errors.Is(err, context.Canceled):
		return failure(499, "client closed the request")
	default:
		s.log.Error("tokenization failed", "err", err)
		return failure(http.StatusInternalServerError, "%v", err)
	}
}

// inputRefusalReason names a 400 for kvrouter_prompts_refused_total.
func inputRefusalReason(msgs *tokenizer.MessagesError, tpl *tokenizer.TemplateError, err error) string {
	switch {
	case msgs != nil:
		return "messages"
	case tpl != nil:
		return "template"
	case errors.Is(err, tokenizer.ErrNoChatTemplate):
		return "no_chat_template"
	case errors.Is(err, errNoTokenizer):
		return "no_tokenizer"
	}
	return "input"
}

// inputRefused counts a prompt the router could not tokenize because of
// the client's input (unknown model, messages the engine's rules refuse,
// a template error) and logs it, rate-limited: a client whose chats all
// fail to render shows up on the dashboard, not only in its own 400s.
func (s *Server) inputRefused(reason string, err error) {
	if s.opts.Metrics != nil {
		s.opts.Metrics.PromptsRefused.WithLabelValues(reason).Inc()
	}
	if ok, suppressed := s.inputLog.Allow(time.Now()); ok {
		s.log.Warn("refused a prompt the router cannot tokenize", "reason", reason, "err", err, "suppressed", suppressed)
	}
}

// textTokens tokenizes a /route, /overlap_scores or /potential_loads
// body that carries prompt or messages in place of token_ids (and applies
// a LoRA adapter named in model). It answers the client itself on failure.
func (s *Server) textTokens(w http.ResponseWriter, r *http.Request, in *textInput, ids **TokenIDs, lora *string) (int, bool) {
	if *ids != nil && len(**ids) > 0 {
		if in.Model != "" && s.opts.Models != nil && len(s.opts.Models.byName) > 0 {
			m, err := s.opts.Models.resolve(in.Model)
			if err != nil {
				s.writeInputError(w, err)
				return 0, false
			}
			if *lora == "" {
				*lora = m.lora
			}
		}
		return 0, true
	}
	if !in.hasText() {
		return 0, true // the caller reports the missing token_ids
	}
	toks, m, err := s.tokenizeInput(r.Context(), in)
	if err != nil {
		s.writeInputError(w, err)
		return 0, false
	}
	t := TokenIDs(toks)
	*ids = &t
	if *lora == "" {
		*lora = m.lora
	}
	return len(toks), true
}

// listModels is GET /v1/models (OpenAI's list; a LoRA adapter names its
// base model as parent, as vLLM does).
func (s *Server) listModels(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID      string  `json:"id"`
		Object  string  `json:"object"`
		Created int64   `json:"created"`
		OwnedBy string  `json:"owned_by"`
		Root    string  `json:"root"`
		Parent  *string `json:"parent"`
		// The router's extensions: how the model's prompts are
		// tokenized now, and its live parity window (docs/parity.md).
		Tokenization string              `json:"kvrouter_tokenization,omitempty"`
		Parity       *parity.ModelStatus `json:"kvrouter_parity,omitempty"`
	}
	data := []model{}
	if m := s.opts.Models; m != nil {
		for _, n := range m.names {
			sm := m.byName[n]
			e := model{ID: n, Object: "model", Created: m.created, OwnedBy: "kvrouter", Root: n}
			e.Tokenization, e.Parity = s.modelTokenization(sm)
			if sm.base != "" {
				base := sm.base
				e.Parent, e.Root = &base, base
			}
			data = append(data, e)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// completionTokens is the prompt of a /v1/completions body: token ids as
// before, or text tokenized with the model's tokenizer; with models
// configured, "model" must name one of them (a LoRA adapter salts the
// hashes).
func (s *Server) completionTokens(ctx context.Context, b *openAIBody) ([]uint32, string, error) {
	in, err := b.textInput()
	if err != nil {
		return nil, "", err
	}
	if _, isText, err := textPrompt(in.Prompt); err != nil {
		return nil, "", err
	} else if isText {
		ids, m, err := s.tokenizeInput(ctx, in)
		if err != nil {
			return nil, "", err
		}
		return ids, m.lora, nil
	}
	var ids []uint32
	if b.promptIDs != nil {
		// Parsed while the body was read.
		if ids = *b.promptIDs; len(ids) == 0 {
			return nil, "", badInput("prompt must not be empty")
		}
	} else if ids, err = completionPrompt(b.fields["prompt"]); err != nil {
		return nil, "", badInput("%v", err)
	}
	lora := ""
	if s.opts.Models != nil && len(s.opts.Models.byName) > 0 && in.Model != "" {
		m, err := s.opts.Models.resolve(in.Model)
		if err != nil {
			return nil, "", err
		}
		lora = m.lora
	}
	return ids, lora, nil
}

// prepareChat reads a /v1/chat/completions body into the request to
// route.
func (s *Server) prepareChat(ctx context.Context, header http.Header, b *openAIBody) (*proxied, *Failure) {
	in, err := b.textInput()
	if err != nil {
		return nil, failure(http.StatusBadRequest, "%v", err)
	}
	fields := b.fields
	if !in.isChat() {
		return nil, failure(http.StatusBadRequest, "messages is required")
	}
	tokens, m, err := s.tokenizeInput(ctx, in)
	if err != nil {
		f := s.inputFailure(err)
		f.Outcome = "bad_input"
		return nil, f
	}
	maxTokens, err := maxTokensOf(fields, "max_completion_tokens", "max_tokens")
	if err != nil {
		return nil, failure(http.StatusBadRequest, "%v", err)
	}
	session, err := s.sessionFromFields(header, fields)
	if err != nil {
		return nil, failure(http.StatusBadRequest, "%v", err)
	}
	return &proxied{s: s, tokens: tokens, fields: fields, maxTokens: maxTokens, path: PathChat, body: b.raw, lora: m.lora, session: session,
		model: m, source: s.paritySource(m), in: in}, nil
}

// maxTokensOf reads the first of the given fields that is present.
func maxTokensOf(fields map[string]json.RawMessage, names ...string) (uint64, error) {
	for _, n := range names {
		raw, ok := fields[n]
		if !ok || !present(raw) {
			continue
		}
		var v uint64
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, fmt.Errorf("%s must be a non-negative integer", n)
		}
		return v, nil
	}
	return 0, nil
}
