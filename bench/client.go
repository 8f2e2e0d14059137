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

	"github.com/kvrouter/kvrouter/resume"
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
	// Cuts, Resent, Resumed: as Resumption (Client.Resumes).
	Cuts, Resent, Resumed int
	Err                   error
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
	// through a dead replica is cut (Resumes continues it).
	Unary bool
	// Resumes is how many times a request goes on after its connection
	// failed (the router replica carrying it died): a request with no
	// answer yet, or a stream cut before any text, is sent again as it
	// was; a stream cut mid-answer is continued from the text received
	// (StreamResumed). 0: a cut request fails.
	Resumes int
}

// ErrCut marks a request whose connection failed or whose stream ended
// without [DONE]: the client may send it again or continue it.
var ErrCut = errors.New("connection cut")

// Do sends one completion to baseURL and records its timings. Failures
// are reported in Result.Err, never as a panic.
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
	chat := len(req.Messages) > 0
	if chat { // the chat workload: the router tokenizes
		path = "/v1/chat/completions"
		body, err = json.Marshal(chatCompletionRequest{Model: c.Model, Messages: req.Messages, MaxTokens: req.MaxTokens,
			Stream: creq.Stream, StreamOptions: creq.StreamOptions})
	} else {
		body, err = json.Marshal(creq)
	}
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	if c.Unary {
		for attempt := 0; ; attempt++ {
			err := c.unary(ctx, hc, baseURL+path, body, res)
			if !errors.Is(err, ErrCut) || attempt >= c.Resumes || ctx.Err() != nil {
				return err
			}
			res.Cuts++
			res.Resent++
		}
	}
	var tokens []uint32
	if !chat {
		tokens = req.Tokens
	}
	var last time.Time
	st, err := StreamResumed(ctx, hc, baseURL+path, body, chat, tokens, c.Resumes, func(line []byte) error {
		_, perr := res.consumeLine(line, &last)
		return perr
	})
	res.Cuts, res.Resent, res.Resumed = st.Cuts, st.Resent, st.Resumed
	return err
}

// unary sends a whole-answer request once.
func (c *Client) unary(ctx context.Context, hc *http.Client, url string, body []byte, res *Result) error {
	resp, err := postCompletion(ctx, hc, url, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readWhole(resp.Body, res)
}

// postCompletion sends body to url and returns a 200 answer. A failed connection
// (no answer) is ErrCut; any other status is ErrBadResponse.
func postCompletion(ctx context.Context, hc *http.Client, url string, body []byte) (*http.Response, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("send to %s: %w", url, err)
		}
		return nil, fmt.Errorf("%w: send to %s: %w", ErrCut, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s answered %d: %s", ErrBadResponse, url, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return resp, nil
}

// Resumption is what keeping one stream going took.
type Resumption struct {
	// Cuts: connections that failed or streams that ended without
	// [DONE]. Resent: of them, requests sent again as they were (no text
	// had arrived). Resumed: continuations sent (text had arrived).
	Cuts, Resent, Resumed int
}

// StreamResumed posts a streamed completion or chat completion (body, as
// JSON; tokens, its prompt's token ids when known) to url and hands each
// data line of one stream to onLine ("data: ..." without the line end):
// content chunks, the usage chunk, [DONE]. When the connection fails or
// the stream ends without [DONE], it sends the request again, at most
// resumes times: as it was when no text had arrived, else as the
// continuation of what arrived (resume.Stream.Continue, the rule the
// router's proxy migrates streams by), whose lines go on in the same
// stream, its usage counting the whole generation. So onLine sees no
// text twice and none missing. A new request id comes with each answer
// (the router names each routed request afresh; a continuation is a new
// request to it). An error event, a status other than 200 and a stream
// that cannot be continued exactly (resume's rules) end it with an
// error; so does an error from onLine.
func StreamResumed(ctx context.Context, hc *http.Client, url string, body []byte, chat bool, tokens []uint32, resumes int,
	onLine func(line []byte) error) (Resumption, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return Resumption{}, fmt.Errorf("request body: %w", err)
	}
	st := resume.New(chat, fields, tokens)
	var r Resumption
	send := body
	for {
		err := streamOnce(ctx, hc, url, send, st, onLine)
		if !errors.Is(err, ErrCut) || r.Cuts >= resumes || ctx.Err() != nil {
			return r, err
		}
		r.Cuts++
		if !st.Relayed() {
			r.Resent++
			continue
		}
		cont, cerr := st.Continue()
		if errors.Is(cerr, resume.ErrDone) {
			// Every token had arrived; only the end was lost.
			return r, onLine([]byte("data: [DONE]"))
		}
		if cerr != nil {
			return r, fmt.Errorf("%w; the stream cannot be continued: %v", err, cerr)
		}
		r.Resumed++
		send = cont.Body
	}
}

// streamOnce sends one request of a stream and relays its lines.
func streamOnce(ctx context.Context, hc *http.Client, url string, body []byte, st *resume.Stream, onLine func([]byte) error) error {
	resp, err := postCompletion(ctx, hc, url, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 32<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil && !bytes.Equal(bytes.TrimSpace(line), []byte("data: [DONE]")) {
			line = nil // a line cut short is not a line: it comes again whole in the continuation
		}
		if len(line) > 0 {
			line = bytes.TrimSpace(line)
			switch st.Observe(line) {
			case resume.Error:
				return fmt.Errorf("%w: error event: %s", ErrBadResponse, line)
			case resume.Usage:
				if perr := onLine(bytes.TrimSpace(st.FixUsage(line))); perr != nil {
					return perr
				}
			case resume.Content:
				if perr := onLine(line); perr != nil {
					return perr
				}
			case resume.Done:
				if perr := onLine(line); perr != nil {
					return perr
				}
				// Read to the end (the blank line, the chunked end) so
				// the connection goes back to the pool: closed before its
				// end, the transport drops it and the next request dials.
				_, _ = io.Copy(io.Discard, io.LimitReader(br, 4<<10)) // the answer is complete: a failure here loses nothing
				return nil
			case resume.Other:
				if u := st.Unsupported(); u == "malformed chunk" {
					return fmt.Errorf("%w: chunk is not JSON: %s", ErrBadResponse, line)
				}
			}
		}
		if err == io.EOF {
			return fmt.Errorf("%w: %w: stream ended without [DONE] after %d tokens", ErrBadResponse, ErrCut, st.Generated())
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("read stream: %w", err)
			}
			return fmt.Errorf("%w: read stream: %w", ErrCut, err)
		}
	}
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

// consumeLine reads one data line of a stream: every chunk with a
// choice is one token; a chunk with usage carries the engine's counts.
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
