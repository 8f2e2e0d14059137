package parity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// The engine's usage object, as vLLM and SGLang write it:
//
//	"usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16,
//	          "prompt_tokens_details": {"cached_tokens": 8}}
//
// vLLM fills prompt_tokens_details only with --enable-prompt-tokens-details
// (null otherwise); SGLang with --enable-cache-report, and only when
// something was cached (null when cached_tokens would be 0). Other fields
// of usage are the engine's and are relayed untouched; only these two are
// read.

// ErrMalformedUsage marks a usage object that is there but unreadable.
var ErrMalformedUsage = errors.New("malformed usage")

type wireUsage struct {
	PromptTokens        *float64 `json:"prompt_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *float64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type wireBody struct {
	Choices *[]json.RawMessage `json:"choices"`
	Usage   json.RawMessage    `json:"usage"`
}

func count(v float64, field string) (int, error) {
	if v < 0 || v != math.Trunc(v) || v > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %s is %v, not a token count", ErrMalformedUsage, field, v)
	}
	return int(v), nil
}

// decodeUsage reads a usage value (ok false: absent or null).
func decodeUsage(raw json.RawMessage) (Usage, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return Usage{}, false, nil
	}
	var w wireUsage
	if err := json.Unmarshal(raw, &w); err != nil {
		return Usage{}, false, fmt.Errorf("%w: %v", ErrMalformedUsage, err)
	}
	if w.PromptTokens == nil {
		return Usage{}, false, fmt.Errorf("%w: no prompt_tokens", ErrMalformedUsage)
	}
	var u Usage
	var err error
	if u.PromptTokens, err = count(*w.PromptTokens, "prompt_tokens"); err != nil {
		return Usage{}, false, err
	}
	if d := w.PromptTokensDetails; d != nil && d.CachedTokens != nil {
		if u.CachedTokens, err = count(*d.CachedTokens, "prompt_tokens_details.cached_tokens"); err != nil {
			return Usage{}, false, err
		}
		if u.CachedTokens > u.PromptTokens {
			return Usage{}, false, fmt.Errorf("%w: cached_tokens %d exceed prompt_tokens %d", ErrMalformedUsage, u.CachedTokens, u.PromptTokens)
		}
		u.HasCached = true
	}
	return u, true, nil
}

// ResponseUsage reads the usage of a whole (non-streamed) OpenAI
// response body. ok is false when the response carries none.
func ResponseUsage(body []byte) (u Usage, ok bool, err error) {
	var w wireBody
	if err := json.Unmarshal(body, &w); err != nil {
		return Usage{}, false, fmt.Errorf("%w: response is not a JSON object: %v", ErrMalformedUsage, err)
	}
	return decodeUsage(w.Usage)
}

// Chunk is what one server-sent event's data says about usage.
type Chunk struct {
	Usage    Usage
	HasUsage bool
	// UsageOnly: the chunk is the final usage chunk that
	// stream_options.include_usage adds (an empty choices list and a
	// usage), which a client that did not ask for it must not see.
	UsageOnly bool
}

var usageKey = []byte(`"usage"`)

// StreamChunk reads the data of one server-sent event ("data: " and the
// line end removed). Chunks without a "usage" key cost a byte scan.
func StreamChunk(data []byte) (Chunk, error) {
	if !bytes.Contains(data, usageKey) {
		return Chunk{}, nil
	}
	var w wireBody
	if err := json.Unmarshal(data, &w); err != nil {
		return Chunk{}, fmt.Errorf("%w: stream chunk is not a JSON object: %v", ErrMalformedUsage, err)
	}
	u, ok, err := decodeUsage(w.Usage)
	if err != nil || !ok {
		return Chunk{}, err
	}
	return Chunk{Usage: u, HasUsage: true, UsageOnly: w.Choices != nil && len(*w.Choices) == 0}, nil
}

// TailUsage reads the usage of a unary answer from its last bytes only,
// for an answer too long to keep whole: OpenAI-compatible servers (vLLM,
// SGLang) write "usage" as the body's last member. A `"usage"` followed
// by a colon cannot occur inside a JSON string (its quotes would be
// escaped), so its last occurrence in the tail is the member's key; the
// value after it is decoded alone. ok is false when the tail holds no
// usage key.
func TailUsage(tail []byte) (u Usage, ok bool, err error) {
	for end := len(tail); ; {
		i := bytes.LastIndex(tail[:end], usageKey)
		if i < 0 {
			return Usage{}, false, nil
		}
		rest := bytes.TrimLeft(tail[i+len(usageKey):], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			end = i // a value "usage", not a key: look further back
			continue
		}
		var raw json.RawMessage
		if err := json.NewDecoder(bytes.NewReader(rest[1:])).Decode(&raw); err != nil {
			return Usage{}, false, fmt.Errorf("%w: usage in the answer's tail: %v", ErrMalformedUsage, err)
		}
		return decodeUsage(raw)
	}
}
