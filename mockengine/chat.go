package mockengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// Text and chat: with a tokenizer (ServerConfig.Tokenizer) the mock
// engine takes text prompts and chat messages like vLLM does — a chat is
// rendered with the model's template and encoded without special tokens,
// a text prompt with them — and computes (and publishes KV events of)
// the tokens it got, so a router that tokenizes differently loses its
// cache hits.

// errTextPrompt is a text prompt given to a mock without a tokenizer.
var errTextPrompt = errors.New("text prompt")

// dpRankHeader is the rank a request asks for: vLLM's
// X-data-parallel-rank, else X-Dp-Rank.
func dpRankHeader(r *http.Request) string {
	if v := r.Header.Get("X-data-parallel-rank"); v != "" {
		return v
	}
	return r.Header.Get("X-Dp-Rank")
}

// textTokens tokenizes a completion body's text prompt ("..." or ["..."]).
func (s *Server) textTokens(body []byte) ([]uint32, error) {
	var req struct {
		Prompt           json.RawMessage `json:"prompt"`
		AddSpecialTokens *bool           `json:"add_special_tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, badRequest("malformed JSON body: %v", err)
	}
	var text string
	if err := json.Unmarshal(req.Prompt, &text); err != nil {
		var list []string
		if err := json.Unmarshal(req.Prompt, &list); err != nil || len(list) != 1 {
			return nil, badRequest("prompt must be token ids, a string or a list of one string")
		}
		text = list[0]
	}
	if s.cfg.Tokenizer == nil {
		return nil, badRequest("text prompts need a tokenizer: start the mock worker with --tokenizer, or send token ids")
	}
	ids := s.cfg.Tokenizer.Encode(text, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	if len(ids) == 0 {
		return nil, badRequest("prompt must not be empty")
	}
	return ids, nil
}

// parseTextCompletion parses a completion whose prompt is text: the
// prompt tokenized, the rest as for token ids.
func (s *Server) parseTextCompletion(body []byte, rankHeader string) (parsedCompletion, error) {
	ids, err := s.textTokens(body)
	if err != nil {
		return parsedCompletion{}, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return parsedCompletion{}, badRequest("malformed JSON body: %v", err)
	}
	raw, _ := json.Marshal(ids) // a []uint32 always encodes
	fields["prompt"] = raw
	body, _ = json.Marshal(fields) // raw JSON values re-encode as they are
	return parseCompletion(body, rankHeader)
}

// chatRequest is the part of a chat completion body the mock reads.
type chatRequest struct {
	Model                string          `json:"model"`
	Messages             json.RawMessage `json:"messages"`
	Tools                json.RawMessage `json:"tools"`
	Documents            json.RawMessage `json:"documents"`
	ContinueFinalMessage *bool           `json:"continue_final_message"`
	ReasoningEffort      *string         `json:"reasoning_effort"`
	ChatTemplate         string          `json:"chat_template"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
	Prompt               json.RawMessage `json:"prompt"` // /tokenize only
	MaxTokens            *int            `json:"max_tokens"`
	MaxCompletionTokens  *int            `json:"max_completion_tokens"`
	Stream               bool            `json:"stream"`
	StreamOptions        *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (s *Server) chatTokens(req *chatRequest) ([]uint32, error) {
	if s.cfg.Tokenizer == nil {
		return nil, badRequest("chat needs a tokenizer with a chat template: start the mock worker with --tokenizer")
	}
	chat := s.chatFor(tokenizer.Chat{
		Messages: req.Messages, Tools: req.Tools, Documents: req.Documents, Kwargs: req.ChatTemplateKwargs, Template: req.ChatTemplate,
		AddGenerationPrompt:  req.AddGenerationPrompt == nil || *req.AddGenerationPrompt,
		ContinueFinalMessage: req.ContinueFinalMessage != nil && *req.ContinueFinalMessage,
	})
	if req.ReasoningEffort != nil {
		chat.ReasoningEffort = *req.ReasoningEffort
	}
	ids, prompt, err := s.cfg.Tokenizer.EncodeChat(chat)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	if req.AddSpecialTokens != nil && *req.AddSpecialTokens {
		ids = s.cfg.Tokenizer.Encode(prompt, true)
	}
	return s.cfg.Engine.skewChat(req.Model, ids), nil
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body larger than %d bytes", s.cfg.MaxBodyBytes)
		} else {
			writeError(w, http.StatusBadRequest, "read body: %v", err)
		}
		return nil, false
	}
	return body, true
}

// tokenize is vLLM's POST /tokenize: a prompt or messages in, tokens out.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "malformed JSON body: %v", err)
		return
	}
	var ids []uint32
	var err error
	if len(req.Messages) > 0 && string(req.Messages) != "null" {
		ids, err = s.chatTokens(&req)
	} else {
		ids, err = s.textTokens(body)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"count": len(ids), "tokens": ids, "token_strs": nil,
		"max_model_len": s.cfg.Engine.TotalKVBlocks * s.cfg.Engine.BlockSize,
	})
}

// Chat wire shapes.
type (
	chatMessage struct {
		Role    string `json:"role,omitempty"`
		Content string `json:"content"`
	}
	chatChoice struct {
		Index        int          `json:"index"`
		Message      *chatMessage `json:"message,omitempty"`
		Delta        *chatMessage `json:"delta,omitempty"`
		Logprobs     any          `json:"logprobs"`
		FinishReason *string      `json:"finish_reason"`
	}
	chatResponse struct {
		ID      string           `json:"id"`
		Object  string           `json:"object"`
		Created int64            `json:"created"`
		Model   string           `json:"model"`
		Choices []chatChoice     `json:"choices"`
		Usage   *completionUsage `json:"usage,omitempty"`
		// KVTransferParams answers a do_remote_decode request.
		KVTransferParams *KVTransferParams `json:"kv_transfer_params,omitempty"`
	}
)

// chatCompletions is POST /v1/chat/completions: the messages rendered
// and tokenized, then generated like a completion.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "malformed JSON body: %v", err)
		return
	}
	prompt, err := s.chatTokens(&req)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	maxTokens := DefaultMaxTokens
	switch {
	case req.MaxCompletionTokens != nil:
		maxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		maxTokens = *req.MaxTokens
	}
	if maxTokens < 1 {
		writeError(w, http.StatusBadRequest, "max_tokens must be at least 1, got %d", maxTokens)
		return
	}
	rank := -1
	if h := dpRankHeader(r); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "data-parallel rank header %q is not a non-negative integer", h)
			return
		}
		rank = n
	}
	xfer, err := s.transferOf(body, req.Stream)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	s.faults.drop.dropNow(0)
	started := time.Now()
	if xfer != nil && xfer.DoRemotePrefill {
		if rank, err = s.pullFromPrefill(r.Context(), xfer, prompt, rank); err != nil {
			if r.Context().Err() == nil {
				writeError(w, http.StatusServiceUnavailable, "%v", err)
			}
			return
		}
	}
	stream, err := s.engine.Submit(Request{Prompt: prompt, MaxTokens: maxTokens}, rank)
	switch {
	case errors.Is(err, ErrStopped):
		writeError(w, http.StatusServiceUnavailable, "%v", err)
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	defer stream.Cancel()
	if id := r.Header.Get("X-Request-Id"); id != "" {
		w.Header().Set("X-Request-Id", id)
	}
	w.Header().Set("X-Dp-Rank", strconv.Itoa(int(stream.DpRank)))
	c := &completion{s: s, w: w, r: r, stream: stream, started: started}
	base := chatResponse{ID: "chatcmpl-" + stream.ID, Created: started.Unix(), Model: s.cfg.Engine.ModelName}
	if !req.Stream {
		var text strings.Builder
		for {
			outs, err := stream.Next(r.Context())
			c.observe(outs)
			for _, o := range outs {
				text.WriteString(tokenText(o.Token))
			}
			s.faults.drop.dropNow(c.generated)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				c.fail(err)
				return
			}
		}
		base.Object = "chat.completion"
		base.Choices = []chatChoice{{Message: &chatMessage{Role: "assistant", Content: text.String()}, FinishReason: &finishLength}}
		base.Usage = usageOf(stream.PromptTokens, c.cached, c.generated)
		if xfer != nil && xfer.DoRemoteDecode {
			if base.KVTransferParams, err = s.holdForDecode(r, stream, prompt); err != nil {
				c.fail(err)
				return
			}
		}
		writeJSON(w, http.StatusOK, base)
		return
	}
	base.Object = "chat.completion.chunk"
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var buf bytes.Buffer
	first := true
	for {
		outs, err := stream.Next(r.Context())
		c.observe(outs)
		buf.Reset()
		for _, o := range outs {
			chunk := base
			d := &chatMessage{Content: tokenText(o.Token)}
			if first {
				d.Role, first = "assistant", false
			}
			choice := chatChoice{Delta: d}
			if o.Finished {
				choice.FinishReason = &finishLength
			}
			chunk.Choices = []chatChoice{choice}
			writeEvent(&buf, chunk)
		}
		if errors.Is(err, io.EOF) {
			if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
				chunk := base
				chunk.Choices = []chatChoice{}
				chunk.Usage = usageOf(stream.PromptTokens, c.cached, c.generated)
				writeEvent(&buf, chunk)
			}
			buf.WriteString("data: [DONE]\n\n")
		} else if err != nil && r.Context().Err() == nil {
			writeEvent(&buf, map[string]any{"error": map[string]any{"message": err.Error(), "type": "server_error", "code": http.StatusServiceUnavailable}})
		}
		if buf.Len() > 0 {
			if _, werr := w.Write(buf.Bytes()); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return
		}
		s.faults.drop.dropNow(c.generated)
	}
}
