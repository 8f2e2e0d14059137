package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// EngineTokenizer tokenizes through an engine's POST /tokenize (vLLM's
// API: a prompt or messages in, tokens out) for models whose template the
// in-process engine cannot render (--tokenizer-mode engine). Answers are
// cached per identical input; a worker that fails is skipped for the
// next; no worker, a timeout or worker errors are a clear 502/503.
type EngineTokenizer struct {
	// Timeout bounds one /tokenize call.
	Timeout time.Duration
	// CacheEntries bounds the cache (0: 4096).
	CacheEntries int

	client  *http.Client
	workers func(ctx context.Context) ([]string, error)
	next    atomic.Uint64

	mu    sync.Mutex
	cache map[[32]byte][]uint32

	// Calls counts /tokenize requests sent (tests).
	Calls atomic.Int64
}

// engineError is a tokenization the engine could not do, with the status
// the router answers.
type engineError struct {
	status int
	msg    string
}

func (e *engineError) Error() string { return e.msg }

type tokenizeBody struct {
	Model               string          `json:"model,omitempty"`
	Prompt              *string         `json:"prompt,omitempty"`
	Messages            json.RawMessage `json:"messages,omitempty"`
	Tools               json.RawMessage `json:"tools,omitempty"`
	ChatTemplate        string          `json:"chat_template,omitempty"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs,omitempty"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt,omitempty"`
	// ContinueFinalMessage is vLLM's /tokenize field of that name.
	ContinueFinalMessage bool `json:"continue_final_message,omitempty"`
	AddSpecialTokens     bool `json:"add_special_tokens"`
}

func (e *EngineTokenizer) tokenizeText(ctx context.Context, m *servedModel, text string, special bool) ([]uint32, error) {
	return e.call(ctx, tokenizeBody{Model: m.engineName(), Prompt: &text, AddSpecialTokens: special})
}

func (e *EngineTokenizer) tokenizeChat(ctx context.Context, m *servedModel, c tokenizer.Chat, special bool) ([]uint32, error) {
	gen := c.AddGenerationPrompt
	return e.call(ctx, tokenizeBody{
		Model: m.engineName(), Messages: c.Messages, Tools: c.Tools, ChatTemplate: c.Template,
		ChatTemplateKwargs: c.Kwargs, AddGenerationPrompt: &gen, AddSpecialTokens: special,
		ContinueFinalMessage: c.ContinueFinalMessage,
	})
}

// engineName is the model name the engine knows: a LoRA adapter's
// tokenizer is its base model's.
func (m *servedModel) engineName() string {
	if m.base != "" {
		return m.base
	}
	return m.name
}

func (e *EngineTokenizer) call(ctx context.Context, body tokenizeBody) ([]uint32, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode /tokenize request: %w", err)
	}
	key := sha256.Sum256(raw)
	e.mu.Lock()
	if ids, ok := e.cache[key]; ok {
		e.mu.Unlock()
		return ids, nil
	}
	e.mu.Unlock()
	urls, err := e.workers(ctx)
	if err != nil || len(urls) == 0 {
		return nil, &engineError{http.StatusServiceUnavailable, "no worker to tokenize with (--tokenizer-mode engine): none is registered"}
	}
	start := int(e.next.Add(1))
	var last error
	for i := 0; i < min(len(urls), 3); i++ {
		u := urls[(start+i)%len(urls)]
		ids, err := e.post(ctx, u, raw)
		if err == nil {
			e.store(key, ids)
			return ids, nil
		}
		var ee *engineError
		if errors.As(err, &ee) && ee.status == http.StatusBadRequest {
			return nil, err // the input is at fault: another worker says the same
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		last = err
	}
	return nil, &engineError{http.StatusBadGateway, fmt.Sprintf("engine tokenization failed (--tokenizer-mode engine): %v", last)}
}

func (e *EngineTokenizer) post(ctx context.Context, base string, raw []byte) ([]uint32, error) {
	e.Calls.Add(1)
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/tokenize", bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s/tokenize: %w", base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("POST %s/tokenize: read answer: %w", base, err)
	}
	if resp.StatusCode == http.StatusBadRequest {
		return nil, &engineError{http.StatusBadRequest, fmt.Sprintf("the engine refused to tokenize: %s", bytes.TrimSpace(data))}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s/tokenize: status %d: %s", base, resp.StatusCode, bytes.TrimSpace(data))
	}
	var out struct {
		Tokens *TokenIDs `json:"tokens"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Tokens == nil {
		return nil, fmt.Errorf("POST %s/tokenize: answer has no tokens list", base)
	}
	return *out.Tokens, nil
}

func (e *EngineTokenizer) store(key [32]byte, ids []uint32) {
	limit := e.CacheEntries
	if limit <= 0 {
		limit = 4096
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cache == nil || len(e.cache) >= limit {
		e.cache = make(map[[32]byte][]uint32)
	}
	e.cache[key] = ids
}

// allWorkerURLs lists the registered workers' base URLs.
func (s *Server) allWorkerURLs(ctx context.Context) ([]string, error) {
	reg, err := s.opts.Router.Registry(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, w := range reg.Workers {
		if w.Worker.Url != "" {
			out = append(out, w.Worker.Url)
		}
	}
	return out, nil
}
