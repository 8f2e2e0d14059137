package mockengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// DefaultMaxTokens is OpenAI's default completion length.
const DefaultMaxTokens = 16

// completionRequest is the part of an OpenAI completion body the mock
// engine reads. dp_rank is the router's extension.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	DpRank *int `json:"dp_rank"`
}

// errBadRequest marks client errors answered with 400.
var errBadRequest = errors.New("bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// parsePrompt accepts vLLM's token-id prompt forms: [1,2,3] or [[1,2,3]].
func parsePrompt(raw json.RawMessage) ([]uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, badRequest("prompt is required")
	}
	if raw[0] == '"' || bytes.HasPrefix(bytes.TrimSpace(raw[1:]), []byte(`"`)) && raw[0] == '[' {
		return nil, fmt.Errorf("%w: %w: text prompts need a tokenizer (--tokenizer): send prompt as a list of token ids", errBadRequest, errTextPrompt)
	}
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err == nil {
		if len(ids) == 0 {
			return nil, badRequest("prompt must not be empty")
		}
		return ids, nil
	}
	var batch [][]uint32
	if err := json.Unmarshal(raw, &batch); err != nil || len(batch) != 1 || len(batch[0]) == 0 {
		return nil, badRequest("prompt must be a non-empty list of token ids (uint32), or a list holding exactly one such list")
	}
	return batch[0], nil
}

// parsedCompletion is a checked completion request.
type parsedCompletion struct {
	prompt       []uint32
	maxTokens    int
	dpRank       int // -1: none asked for, use the least loaded rank
	stream       bool
	includeUsage bool
}

// parseCompletion decodes and checks a completion body; rankHeader
// (X-Dp-Rank) is the fallback for the body's dp_rank.
func parseCompletion(body []byte, rankHeader string) (parsedCompletion, error) {
	var req completionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return parsedCompletion{}, badRequest("malformed JSON body: %v", err)
	}
	prompt, err := parsePrompt(req.Prompt)
	if err != nil {
		return parsedCompletion{}, err
	}
	p := parsedCompletion{
		prompt: prompt, maxTokens: DefaultMaxTokens, dpRank: -1, stream: req.Stream,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
	}
	if req.MaxTokens != nil {
		p.maxTokens = *req.MaxTokens
	}
	if p.maxTokens < 1 {
		return parsedCompletion{}, badRequest("max_tokens must be at least 1, got %d", p.maxTokens)
	}
	switch {
	case req.DpRank != nil:
		p.dpRank = *req.DpRank
	case rankHeader != "":
		n, err := strconv.Atoi(rankHeader)
		if err != nil {
			return parsedCompletion{}, badRequest("X-Dp-Rank header %q is not an integer", rankHeader)
		}
		p.dpRank = n
	default:
		return p, nil
	}
	if p.dpRank < 0 {
		return parsedCompletion{}, badRequest("dp_rank must not be negative, got %d", p.dpRank)
	}
	return p, nil
}

// Wire shapes of responses.
type (
	completionChoice struct {
		Index        int      `json:"index"`
		Text         string   `json:"text"`
		TokenIDs     []uint32 `json:"token_ids"`
		Logprobs     any      `json:"logprobs"`
		FinishReason *string  `json:"finish_reason"`
	}
	promptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	}
	completionUsage struct {
		PromptTokens        int                 `json:"prompt_tokens"`
		CompletionTokens    int                 `json:"completion_tokens"`
		TotalTokens         int                 `json:"total_tokens"`
		PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
	}
	completionResponse struct {
		ID      string             `json:"id"`
		Object  string             `json:"object"`
		Created int64              `json:"created"`
		Model   string             `json:"model"`
		Choices []completionChoice `json:"choices"`
		Usage   *completionUsage   `json:"usage,omitempty"`
		// KVTransferParams answers a do_remote_decode request: where the
		// decode engine finds the prompt's blocks.
		KVTransferParams *KVTransferParams `json:"kv_transfer_params,omitempty"`
	}
)

// finishLength is the only finish reason: the mock never emits EOS.
var finishLength = "length"

// tokenText renders a token id as text; there is no tokenizer.
func tokenText(id uint32) string { return " t" + strconv.FormatUint(uint64(id), 10) }

func usageOf(promptTokens, cachedTokens, completionTokens int) *completionUsage {
	return &completionUsage{
		PromptTokens: promptTokens, CompletionTokens: completionTokens,
		TotalTokens:         promptTokens + completionTokens,
		PromptTokensDetails: promptTokensDetails{CachedTokens: cachedTokens},
	}
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body larger than %d bytes", s.cfg.MaxBodyBytes)
			return
		}
		writeError(w, http.StatusBadRequest, "read body: %v", err)
		return
	}
	p, err := parseCompletion(body, dpRankHeader(r))
	if errors.Is(err, errTextPrompt) && s.cfg.Tokenizer != nil {
		p, err = s.parseTextCompletion(body, dpRankHeader(r))
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	xfer, err := s.transferOf(body, p.stream)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	s.faults.drop.dropNow(0)
	started := time.Now()
	if xfer != nil && xfer.DoRemotePrefill {
		if p.dpRank, err = s.pullFromPrefill(r.Context(), xfer, p.prompt, p.dpRank); err != nil {
			if r.Context().Err() == nil {
				writeError(w, http.StatusServiceUnavailable, "%v", err)
			}
			return
		}
	}
	stream, err := s.engine.Submit(Request{Prompt: p.prompt, MaxTokens: p.maxTokens}, p.dpRank)
	switch {
	case errors.Is(err, ErrStopped):
		writeError(w, http.StatusServiceUnavailable, "%v", err)
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	// Cancel is a no-op once the request finished; on any early return
	// (client gone, write failure) it frees the request's blocks.
	defer stream.Cancel()
	if id := r.Header.Get("X-Request-Id"); id != "" {
		w.Header().Set("X-Request-Id", id)
	}
	w.Header().Set("X-Dp-Rank", strconv.Itoa(int(stream.DpRank)))
	c := &completion{
		s: s, w: w, r: r, stream: stream, started: started,
		resp: completionResponse{
			ID: "cmpl-" + stream.ID, Object: "text_completion", Created: started.Unix(), Model: s.cfg.Engine.ModelName,
		},
	}
	if xfer != nil && xfer.DoRemoteDecode {
		c.prefillFor = p.prompt
	}
	if p.stream {
		c.includeUsage = p.includeUsage
		c.serveStream()
	} else {
		c.serveWhole()
	}
}

// completion is one request being answered.
type completion struct {
	s            *Server
	w            http.ResponseWriter
	r            *http.Request
	stream       *Stream
	started      time.Time
	resp         completionResponse
	includeUsage bool
	generated    int
	cached       int
	// prefillFor is the prompt of a do_remote_decode request: its blocks
	// are held for the decode engine once computed.
	prefillFor []uint32
}

// observe records the first token's latency.
func (c *completion) observe(outs []Output) {
	if c.generated == 0 && len(outs) > 0 {
		c.s.metrics.ttft.Observe(time.Since(c.started).Seconds())
		c.cached = outs[0].CachedTokens
	}
	c.generated += len(outs)
}

func (c *completion) serveWhole() {
	var tokens []uint32
	var text bytes.Buffer
	for {
		outs, err := c.stream.Next(c.r.Context())
		c.observe(outs)
		for _, o := range outs {
			tokens = append(tokens, o.Token)
			text.WriteString(tokenText(o.Token))
		}
		c.s.faults.drop.dropNow(c.generated)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			c.fail(err)
			return
		}
	}
	c.resp.Choices = []completionChoice{{Text: text.String(), TokenIDs: tokens, FinishReason: &finishLength}}
	c.resp.Usage = usageOf(c.stream.PromptTokens, c.cached, len(tokens))
	if c.prefillFor != nil {
		params, err := c.s.holdForDecode(c.r, c.stream, c.prefillFor)
		if err != nil {
			c.fail(err)
			return
		}
		c.resp.KVTransferParams = params
	}
	writeJSON(c.w, http.StatusOK, c.resp)
}

// fail answers an engine error on a non-streamed request (if the client
// is still there to read it).
func (c *completion) fail(err error) {
	if c.r.Context().Err() != nil {
		return
	}
	writeError(c.w, http.StatusServiceUnavailable, "%v", err)
}

// serveStream writes one SSE event per token, then a usage chunk if asked
// for, then [DONE]. The headers go out at once so a proxy sees the
// response start; the first data line is the first token.
func (c *completion) serveStream() {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	c.w.WriteHeader(http.StatusOK)
	flusher, _ := c.w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	var buf bytes.Buffer
	for {
		outs, err := c.stream.Next(c.r.Context())
		c.observe(outs)
		buf.Reset()
		for _, o := range outs {
			chunk := c.resp
			choice := completionChoice{Text: tokenText(o.Token), TokenIDs: []uint32{o.Token}}
			if o.Finished {
				choice.FinishReason = &finishLength
			}
			chunk.Choices = []completionChoice{choice}
			writeEvent(&buf, chunk)
		}
		done := errors.Is(err, io.EOF)
		if done {
			if c.includeUsage {
				chunk := c.resp
				chunk.Choices = []completionChoice{}
				chunk.Usage = usageOf(c.stream.PromptTokens, c.cached, c.generated)
				writeEvent(&buf, chunk)
			}
			buf.WriteString("data: [DONE]\n\n")
		} else if err != nil && c.r.Context().Err() == nil {
			// The engine stopped: say so, and leave out [DONE] so the
			// client knows the completion is cut short.
			writeEvent(&buf, map[string]any{"error": map[string]any{"message": err.Error(), "type": "server_error", "code": http.StatusServiceUnavailable}})
		}
		if buf.Len() > 0 {
			if _, werr := c.w.Write(buf.Bytes()); werr != nil {
				return // client gone: the deferred Cancel frees the blocks
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return
		}
		c.s.faults.drop.dropNow(c.generated)
	}
}

func writeEvent(buf *bytes.Buffer, v any) {
	buf.WriteString("data: ")
	b, _ := json.Marshal(v) // plain structs and maps of strings: cannot fail
	buf.Write(b)
	buf.WriteString("\n\n")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// The status is sent: an error here is the client gone mid-answer,
	// which nothing can be done about.
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers {"error": {"message", "type", "code"}}, OpenAI's
// error shape.
func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	kind := "invalid_request_error"
	if status >= 500 {
		kind = "server_error"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": fmt.Sprintf(format, args...), "type": kind, "code": status,
	}})
}
