package httpapi

import (
	"encoding/json"
	"errors"
)

// An OpenAI body (/v1/completions, /v1/chat/completions) is read once:
// its top-level members are split and validated in one pass, a prompt of
// token ids is parsed by TokenIDs' scanner in that same pass, and the
// fields the router reads are decoded from their own small values.
// encoding/json over the whole body scans it twice per decode
// (validation, then decoding) byte by byte; decoding it as a field map
// and again as the text input made four such passes over a 4k-token
// prompt, most of a decision's CPU through the proxy and the endpoint
// picker. The body still reaches the engine unchanged, and any body the
// one pass does not accept goes to encoding/json, whose verdict (and
// message) the client gets.

// openAIBody is an OpenAI request body split into its top-level members.
type openAIBody struct {
	raw    []byte
	fields map[string]json.RawMessage
	// promptIDs is the prompt when it is one flat array of token ids,
	// parsed while the body was validated (nil: not parsed).
	promptIDs *TokenIDs
}

// readOpenAIBody splits body into its top-level members. A body that is
// not valid JSON gets encoding/json's error; a valid body that is not an
// object (null) gets nil fields.
func readOpenAIBody(body []byte) (*openAIBody, error) {
	if b, ok := splitObject(body); ok {
		return b, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	return &openAIBody{raw: body, fields: fields}, nil
}

// splitObject is readOpenAIBody's single pass: ok false when body is not
// a well-formed JSON object (or uses a form the pass leaves to
// encoding/json). It accepts no body encoding/json refuses: strings are
// checked as the JSON grammar states (escapes, no control bytes; bytes
// past ASCII are taken as they are, as encoding/json takes them), and
// every value that is not a string or an array of token ids is checked
// by json.Valid.
func splitObject(body []byte) (*openAIBody, bool) {
	b := &openAIBody{raw: body, fields: make(map[string]json.RawMessage, 8)}
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, false
	}
	i = skipWS(body, i+1)
	if i < len(body) && body[i] == '}' {
		return b, skipWS(body, i+1) == len(body)
	}
	for {
		if i >= len(body) || body[i] != '"' {
			return nil, false
		}
		kEnd, plain, ok := scanString(body, i)
		if !ok {
			return nil, false
		}
		var key string
		if plain {
			key = string(body[i+1 : kEnd-1])
		} else if json.Unmarshal(body[i:kEnd], &key) != nil {
			return nil, false
		}
		i = skipWS(body, kEnd)
		if i >= len(body) || body[i] != ':' {
			return nil, false
		}
		i = skipWS(body, i+1)
		vEnd, ids, ok := scanValue(body, i)
		if !ok {
			return nil, false
		}
		b.fields[key] = body[i:vEnd:vEnd]
		if key == "prompt" {
			b.promptIDs = ids // a later duplicate key wins, as in encoding/json
		}
		i = skipWS(body, vEnd)
		if i >= len(body) {
			return nil, false
		}
		switch body[i] {
		case ',':
			i = skipWS(body, i+1)
		case '}':
			return b, skipWS(body, i+1) == len(body)
		default:
			return nil, false
		}
	}
}

// scanValue returns the end of the valid JSON value at body[i], and its
// token ids when it is a flat array of them.
func scanValue(body []byte, i int) (int, *TokenIDs, bool) {
	if i >= len(body) {
		return 0, nil, false
	}
	switch body[i] {
	case '"':
		end, _, ok := scanString(body, i)
		return end, nil, ok
	case '[':
		if end, ok := arrayEnd(body, i); ok {
			var ids TokenIDs
			if ids.UnmarshalJSON(body[i:end]) == nil {
				return end, &ids, true
			}
		}
	}
	end, ok := skipValue(body, i)
	if !ok || !json.Valid(body[i:end]) {
		return 0, nil, false
	}
	return end, nil, true
}

// scanString returns the end of the JSON string starting at body[i] (its
// opening quote), checking its escapes and refusing control bytes as
// encoding/json does; plain: it has no escape and no byte past ASCII (its
// bytes are its text).
func scanString(body []byte, i int) (end int, plain, ok bool) {
	plain = true
	for j := i + 1; j < len(body); j++ {
		c := body[j]
		switch {
		case c == '"':
			return j + 1, plain, true
		case c < 0x20:
			return 0, false, false
		case c >= 0x80:
			plain = false
		case c == '\\':
			plain = false
			j++
			if j >= len(body) {
				return 0, false, false
			}
			switch body[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(body) || !isHex(body[j+1]) || !isHex(body[j+2]) || !isHex(body[j+3]) || !isHex(body[j+4]) {
					return 0, false, false
				}
				j += 4
			default:
				return 0, false, false
			}
		}
	}
	return 0, false, false
}

func isHex(c byte) bool {
	return c-'0' <= 9 || c|0x20-'a' <= 5
}

// textInput is the body's text input, decoded from its own fields (a key
// is matched as spelled, as the engine matches it). A field of the wrong
// type is a malformed body.
func (b *openAIBody) textInput() (*textInput, error) {
	f := b.fields
	in := &textInput{Prompt: f["prompt"], Messages: f["messages"], Tools: f["tools"], Documents: f["documents"],
		ChatTemplateKwargs: f["chat_template_kwargs"]}
	for _, d := range []struct {
		name string
		dst  any
	}{
		{"model", &in.Model},
		{"chat_template", &in.ChatTemplate},
		{"add_generation_prompt", &in.AddGenerationPrompt},
		{"add_special_tokens", &in.AddSpecialTokens},
		{"continue_final_message", &in.ContinueFinalMessage},
		{"reasoning_effort", &in.ReasoningEffort},
	} {
		raw, ok := f[d.name]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, d.dst); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) && typeErr.Field == "" {
				typeErr.Field = d.name
			}
			return nil, badInput("malformed JSON: %s", describeJSONError(err))
		}
	}
	return in, nil
}
