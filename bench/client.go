package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Result is what the client measured for one request.
type Result struct {
	ID    string
	Start time.Time     // when the request was sent
	End   time.Time     // when the stream ended (or failed)
	TTFT  time.Duration // send → first token chunk
	// ITLs are the gaps between consecutive token chunks.
	ITLs         []time.Duration
	OutputTokens int
	PromptTokens int
	CachedTokens int
	// HasUsage says the worker reported usage, so PromptTokens and
	// CachedTokens are the engine's figures rather than unknown.
	HasUsage bool
	Err      error
}

// ErrBadResponse marks a response the client could not use.
var ErrBadResponse = errors.New("bad completion response")

// completionRequest is the OpenAI-style body sent to a worker or the router.
type completionRequest struct {
	Model         string         `json:"model"`
	Prompt        []uint32       `json:"prompt"`
	MaxTokens     int            `json:"max_tokens"`
	Stream        bool           `json:"stream"`
	StreamOptions map[string]any `json:"stream_options,omitempty"`
}

// chatCompletionRequest is the chat workload's body.
type chatCompletionRequest struct {
	Model         string          `json:"model"`
	Messages      json.RawMessage `json:"messages"`
	MaxTokens     int             `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions map[string]any  `json:"stream_options,omitempty"`
}

// completionChunk is the part of a streamed chunk (or a whole non-stream
// response) the client reads.
type completionChunk struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// Client sends completions and times them.
type Client struct {
	HTTP  *http.Client
	Model string
	// Unary asks for whole (non-streamed) completions: TTFT is then the
	// time to the whole answer. A load balancer can retry a unary request
	// whose replica dies before answering; a stream already flowing
	// through a dead replica is cut.
	Unary bool
}

// Do sends one streamed completion to baseURL and records its timings.
// Failures are reported in Result.Err, never as a panic.
func (c *Client) Do(ctx context.Context, baseURL string, req Request) Result {
	res := Result{ID: req.ID, Start: time.Now()}
	res.Err = c.do(ctx, baseURL, req, &res)
	res.End = time.Now()
	return res
}

func (c *Client) do(ctx context.Context, baseURL string, req Request, res *Result) error {
	creq := completionRequest{Model: c.Model, Prompt: req.Tokens, MaxTokens: req.MaxTokens, Stream: !c.Unary}
	if !c.Unary {
		creq.StreamOptions = map[string]any{"include_usage": true}
	}
	var body []byte
	var err error
	path := "/v1/completions"
	if len(req.Messages) > 0 { // the chat workload: the router tokenizes
		path = "/v1/chat/completions"
		body, err = json.Marshal(chatCompletionRequest{Model: c.Model, Messages: req.Messages, MaxTokens: req.MaxTokens,
			Stream: creq.Stream, StreamOptions: creq.StreamOptions})
	} else {
		body, err = json.Marshal(creq)
	}
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		return fmt.Errorf("send to %s: %w", baseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%w: %s answered %d: %s", ErrBadResponse, baseURL, resp.StatusCode, bytes.TrimSpace(msg))
	}
	if c.Unary {
		return readWhole(resp.Body, res)
	}
	return readStream(resp.Body, res)
}

// readWhole decodes a non-streamed completion.
func readWhole(r io.Reader, res *Result) error {
	var ch completionChunk
	if err := json.NewDecoder(r).Decode(&ch); err != nil {
		return fmt.Errorf("%w: completion is not JSON: %v", ErrBadResponse, err)
	}
	if len(ch.Choices) == 0 {
		return fmt.Errorf("%w: completion without choices", ErrBadResponse)
	}
	res.TTFT = time.Since(res.Start)
	res.consumeUsage(&ch)
	return nil
}

// readStream consumes SSE "data:" lines until [DONE]. Every chunk with a
// choice is one token; a chunk with usage carries the engine's counts.
func readStream(r io.Reader, res *Result) error {
	br := bufio.NewReaderSize(r, 32<<10)
	var last time.Time
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			done, perr := res.consumeLine(bytes.TrimSpace(line), &last)
			if perr != nil {
				return perr
			}
			if done {
				// Read to the end (the blank line, the chunked end) so
				// the connection goes back to the pool: closed before its
				// end, the transport drops it and the next request dials.
				_, _ = io.Copy(io.Discard, io.LimitReader(br, 4<<10)) // the answer is complete: a failure here loses nothing
				return nil
			}
		}
		if err == io.EOF {
			return fmt.Errorf("%w: stream ended without [DONE] after %d tokens", ErrBadResponse, res.OutputTokens)
		}
		if err != nil {
			return fmt.Errorf("read stream: %w", err)
		}
	}
}

func (res *Result) consumeLine(line []byte, last *time.Time) (done bool, err error) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return false, nil // blank separators, comments, event names
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return true, nil
	}
	var ch completionChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		return false, fmt.Errorf("%w: chunk is not JSON: %v", ErrBadResponse, err)
	}
	if len(ch.Choices) > 0 {
		now := time.Now()
		if res.OutputTokens == 0 {
			res.TTFT = now.Sub(res.Start)
		} else {
			res.ITLs = append(res.ITLs, now.Sub(*last))
		}
		*last = now
		res.OutputTokens++
	}
	res.consumeUsage(&ch)
	return false, nil
}

// consumeUsage records the engine's token counts when ch carries them.
func (res *Result) consumeUsage(ch *completionChunk) {
	if u := ch.Usage; u != nil {
		res.HasUsage = true
		res.PromptTokens = u.PromptTokens
		if u.PromptTokensDetails != nil {
			res.CachedTokens = u.PromptTokensDetails.CachedTokens
		}
		if u.CompletionTokens > 0 {
			res.OutputTokens = max(res.OutputTokens, u.CompletionTokens)
		}
	}
}

// newHTTPClient keeps enough idle connections per host that an open-loop
// burst reuses connections instead of exhausting ephemeral ports.
func newHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 256
	return &http.Client{Transport: tr}
}
