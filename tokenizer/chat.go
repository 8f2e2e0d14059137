package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// ErrNoChatTemplate is a chat request for a model whose tokenizer has no
// chat template.
var ErrNoChatTemplate = errors.New("the model's tokenizer has no chat template (tokenizer_config.json chat_template or chat_template.jinja)")

// TemplateError is a chat template that failed: it does not parse, it
// called raise_exception, or it failed while rendering.
type TemplateError struct {
	// Raised is true when the template called raise_exception.
	Raised bool
	Err    error
}

func (e *TemplateError) Error() string {
	if e.Raised {
		return "chat template raised an exception: " + e.Err.Error()
	}
	return "chat template error: " + e.Err.Error()
}

func (e *TemplateError) Unwrap() error { return e.Err }

// MessagesError is a malformed messages (or tools) list.
type MessagesError struct{ Msg string }

func (e *MessagesError) Error() string { return e.Msg }

// Chat is a chat request to render.
type Chat struct {
	// Messages is the OpenAI messages array, as JSON.
	Messages json.RawMessage
	// Tools is the tools array (nil: none).
	Tools json.RawMessage
	// Documents is the documents array (nil: none).
	Documents json.RawMessage
	// AddGenerationPrompt ends the prompt with the assistant's turn
	// header (true for a chat completion).
	AddGenerationPrompt bool
	// Kwargs is chat_template_kwargs: more template variables
	// (enable_thinking, reasoning_effort, ...), as a JSON object.
	Kwargs json.RawMessage
	// Template, when set, replaces the model's template.
	Template string
}

type templateCache struct {
	mu  sync.Mutex
	m   map[string]*jinja.Template
	err map[string]error
}

var templates = templateCache{m: map[string]*jinja.Template{}, err: map[string]error{}}

// compile parses a template once per process (templates are few: one
// per model, and the rare per-request override).
func (c *templateCache) compile(src string) (*jinja.Template, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.m[src]; ok {
		return t, nil
	}
	if err, ok := c.err[src]; ok {
		return nil, err
	}
	t, err := jinja.Parse(src)
	if len(c.m)+len(c.err) > 256 { // overrides from requests: keep the cache bounded
		c.m, c.err = map[string]*jinja.Template{}, map[string]error{}
	}
	if err != nil {
		c.err[src] = err
		return nil, err
	}
	c.m[src] = t
	return t, nil
}

// ParseMessages checks an OpenAI messages array (a non-empty list of
// objects, each with a string role; content a string, null or a list of
// parts) and returns it as template values.
func ParseMessages(raw json.RawMessage) (*jinja.List, error) {
	if len(strings.TrimSpace(string(raw))) == 0 || string(raw) == "null" {
		return nil, &MessagesError{"messages is required"}
	}
	v, err := jinja.FromJSON(raw)
	if err != nil {
		return nil, &MessagesError{fmt.Sprintf("messages: malformed JSON: %v", err)}
	}
	l, ok := v.(*jinja.List)
	if !ok {
		return nil, &MessagesError{"messages must be a list of message objects"}
	}
	if len(l.Items) == 0 {
		return nil, &MessagesError{"messages must not be empty"}
	}
	for i, m := range l.Items {
		d, ok := m.(*jinja.Dict)
		if !ok {
			return nil, &MessagesError{fmt.Sprintf("messages[%d] must be an object", i)}
		}
		role, _ := d.Get("role")
		if r, ok := role.(string); !ok || r == "" {
			return nil, &MessagesError{fmt.Sprintf("messages[%d].role must be a non-empty string", i)}
		}
		content, has := d.Get("content")
		if !has {
			continue
		}
		switch c := content.(type) {
		case nil, string:
		case *jinja.List:
			for k, part := range c.Items {
				p, ok := part.(*jinja.Dict)
				if !ok {
					return nil, &MessagesError{fmt.Sprintf("messages[%d].content[%d] must be an object", i, k)}
				}
				if _, ok := p.Get("type"); !ok {
					return nil, &MessagesError{fmt.Sprintf("messages[%d].content[%d].type is required", i, k)}
				}
			}
		default:
			return nil, &MessagesError{fmt.Sprintf("messages[%d].content must be a string, null or a list of parts", i)}
		}
	}
	return l, nil
}

// RenderChat renders a chat with the model's chat template, as
// transformers' apply_chat_template(tokenize=False) does.
func (t *Tokenizer) RenderChat(c Chat) (string, error) {
	src := c.Template
	if src == "" {
		src = t.Config.ChatTemplate
	}
	if src == "" {
		return "", ErrNoChatTemplate
	}
	msgs, err := ParseMessages(c.Messages)
	if err != nil {
		return "", err
	}
	vars := map[string]any{}
	for k, v := range map[string]string{"bos_token": t.Config.BOSToken, "eos_token": t.Config.EOSToken, "unk_token": t.Config.UnkToken, "pad_token": t.Config.PadToken} {
		if v != "" {
			vars[k] = v
		}
	}
	if len(c.Kwargs) > 0 && string(c.Kwargs) != "null" {
		kw, err := jinja.FromJSON(c.Kwargs)
		if err != nil {
			return "", &MessagesError{fmt.Sprintf("chat_template_kwargs: malformed JSON: %v", err)}
		}
		d, ok := kw.(*jinja.Dict)
		if !ok {
			return "", &MessagesError{"chat_template_kwargs must be an object"}
		}
		for _, k := range d.Keys() {
			vars[k], _ = d.Get(k)
		}
	}
	optional := func(name string, raw json.RawMessage) error {
		vars[name] = nil
		if len(raw) == 0 || string(raw) == "null" {
			return nil
		}
		v, err := jinja.FromJSON(raw)
		if err != nil {
			return &MessagesError{fmt.Sprintf("%s: malformed JSON: %v", name, err)}
		}
		if _, ok := v.(*jinja.List); !ok {
			return &MessagesError{name + " must be a list"}
		}
		vars[name] = v
		return nil
	}
	if err := optional("tools", c.Tools); err != nil {
		return "", err
	}
	if err := optional("documents", c.Documents); err != nil {
		return "", err
	}
	vars["messages"] = msgs
	vars["add_generation_prompt"] = c.AddGenerationPrompt
	tpl, err := templates.compile(src)
	if err != nil {
		return "", &TemplateError{Err: err}
	}
	out, err := tpl.Render(vars)
	if err != nil {
		var raised *jinja.RaiseError
		return "", &TemplateError{Raised: errors.As(err, &raised), Err: err}
	}
	return out, nil
}

// EncodeChat renders a chat and returns its token ids (without the
// post-processor's special tokens: the template places them, and engines
// encode a rendered chat with add_special_tokens false) and the prompt.
func (t *Tokenizer) EncodeChat(c Chat) ([]uint32, string, error) {
	prompt, err := t.RenderChat(c)
	if err != nil {
		return nil, "", err
	}
	return t.Encode(prompt, false), prompt, nil
}
