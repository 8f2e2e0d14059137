package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode"

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
	// ContinueFinalMessage leaves the last message open, for the model
	// to continue it (excludes AddGenerationPrompt).
	ContinueFinalMessage bool
	// ReasoningEffort is the request's reasoning_effort ("": not set):
	// a template variable, and vLLM derives enable_thinking from it.
	ReasoningEffort string
	// Kwargs is chat_template_kwargs: more template variables
	// (enable_thinking, reasoning_effort, ...), as a JSON object.
	Kwargs json.RawMessage
	// Template, when set, replaces the model's template.
	Template string
	// Dialect is the engine whose message preprocessing is reproduced.
	Dialect Dialect
	// Raw hands the template the messages and tools as sent, without the
	// engine's preprocessing: what a router that does not reproduce the
	// engine renders (the mock engine's mismatch mode uses it).
	Raw bool
}

type templateCache struct {
	mu  sync.Mutex
	m   map[string]*compiled
	err map[string]error
}

// compiled is a parsed template and the content format each dialect
// detects in it.
type compiled struct {
	tpl    *jinja.Template
	format [2]ContentFormat // by Dialect
}

var templates = templateCache{m: map[string]*compiled{}, err: map[string]error{}}

// compile parses a template once per process (templates are few: one
// per model, and the rare per-request override).
func (c *templateCache) compile(src string) (*compiled, error) {
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
		c.m, c.err = map[string]*compiled{}, map[string]error{}
	}
	if err != nil {
		c.err[src] = err
		return nil, err
	}
	cc := &compiled{tpl: t, format: [2]ContentFormat{ContentString, ContentString}}
	if openai, _ := t.IteratesMessageContent(); openai {
		cc.format[DialectVLLM] = ContentOpenAI
	}
	if t.IteratesContentOf(src) {
		cc.format[DialectSGLang] = ContentOpenAI
	}
	c.m[src] = cc
	return cc, nil
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

// ContentFormat is the content format the dialect's engine detects in
// the model's chat template (ContentString when there is none).
func (t *Tokenizer) ContentFormat(d Dialect) ContentFormat {
	if t.Config.ChatTemplate == "" {
		return ContentString
	}
	c, err := templates.compile(t.Config.ChatTemplate)
	if err != nil {
		return ContentString
	}
	return c.format[d]
}

// kwargsConsumed are apply_chat_template's own parameters: a
// chat_template_kwargs entry with one of these names never reaches the
// template.
var kwargsConsumed = map[string]bool{
	"padding": true, "truncation": true, "max_length": true, "return_tensors": true,
	"return_dict": true, "return_assistant_tokens_mask": true, "tokenizer_kwargs": true,
	"continue_final_message": true,
}

// kwargsRefused are chat_template_kwargs names the engine refuses: vLLM
// rejects chat_template and tokenize, and the rest collide with an
// argument apply_chat_template is already given.
var kwargsRefused = map[string]bool{"chat_template": true, "tokenize": true, "tools": true, "conversation": true, "messages": true}

// RenderChat renders a chat with the model's chat template as the
// dialect's engine does: its message preprocessing (NormalizeMessages,
// NormalizeTools), then transformers' apply_chat_template(tokenize=False).
func (t *Tokenizer) RenderChat(c Chat) (string, error) {
	src := c.Template
	if src == "" {
		src = t.Config.ChatTemplate
	}
	if src == "" {
		return "", ErrNoChatTemplate
	}
	tpl, err := templates.compile(src)
	if err != nil {
		return "", &TemplateError{Err: err}
	}
	var msgs, tools *jinja.List
	if c.Raw {
		if msgs, err = ParseMessages(c.Messages); err != nil {
			return "", err
		}
		if tools, err = rawList("tools", c.Tools); err != nil {
			return "", err
		}
	} else {
		if msgs, err = NormalizeMessages(c.Messages, tpl.format[c.Dialect], c.Dialect); err != nil {
			return "", err
		}
		if tools, err = NormalizeTools(c.Tools, c.Dialect); err != nil {
			return "", err
		}
	}
	vars := map[string]any{}
	for k, v := range map[string]string{"bos_token": t.Config.BOSToken, "eos_token": t.Config.EOSToken, "unk_token": t.Config.UnkToken, "pad_token": t.Config.PadToken} {
		if v != "" {
			vars[k] = v
		}
	}
	userKwargs := map[string]bool{}
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
			if kwargsRefused[k] {
				return "", &MessagesError{fmt.Sprintf("chat_template_kwargs: %q is not a template variable the engine accepts from a request", k)}
			}
			if kwargsConsumed[k] {
				continue
			}
			userKwargs[k] = true
			vars[k], _ = d.Get(k)
		}
	}
	documents, err := rawList("documents", c.Documents)
	if err != nil {
		return "", err
	}
	sglang := c.Dialect == DialectSGLang && !c.Raw
	switch {
	case sglang:
		// SGLang passes no documents of its own; the request's
		// reasoning_effort is a template variable unless the kwargs set it.
		if !userKwargs["documents"] {
			vars["documents"] = nil
		}
		if c.ReasoningEffort != "" && !userKwargs["reasoning_effort"] {
			vars["reasoning_effort"] = c.ReasoningEffort
		}
	default:
		// vLLM's build_chat_params: the request's fields override the
		// kwargs unless they are unset.
		if documents != nil || !userKwargs["documents"] {
			vars["documents"] = listOrNil(documents)
		}
		if c.ReasoningEffort != "" {
			vars["reasoning_effort"] = c.ReasoningEffort
			if !userKwargs["enable_thinking"] {
				vars["enable_thinking"] = c.ReasoningEffort != "none"
			}
		}
	}
	addGen := c.AddGenerationPrompt
	if sglang {
		// SGLang always asks for the generation prompt; a conversation
		// that ends with an assistant turn is rendered as a user turn,
		// or (continue_final_message) without it, its text appended.
		if userKwargs["add_generation_prompt"] {
			return "", &MessagesError{"chat_template_kwargs: add_generation_prompt is set by the engine"}
		}
		return t.renderSGLang(tpl.tpl, msgs, tools, vars, c.ContinueFinalMessage)
	}
	if c.ContinueFinalMessage && addGen {
		return "", &MessagesError{"cannot set both continue_final_message and add_generation_prompt to true"}
	}
	vars["messages"] = msgs
	vars["tools"] = listOrNil(tools)
	vars["add_generation_prompt"] = addGen
	if c.ContinueFinalMessage {
		return continueFinal(tpl.tpl, src, msgs, vars)
	}
	return render(tpl.tpl, vars)
}

func render(tpl *jinja.Template, vars map[string]any) (string, error) {
	out, err := tpl.Render(vars)
	if err != nil {
		var raised *jinja.RaiseError
		return "", &TemplateError{Raised: errors.As(err, &raised), Err: err}
	}
	return out, nil
}

// listOrNil keeps a nil list a template None.
func listOrNil(l *jinja.List) any {
	if l == nil {
		return nil
	}
	return l
}

// rawList parses an optional JSON list (nil when absent or null).
func rawList(name string, raw json.RawMessage) (*jinja.List, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	v, err := jinja.FromJSON(raw)
	if err != nil {
		return nil, &MessagesError{fmt.Sprintf("%s: malformed JSON: %v", name, err)}
	}
	l, ok := v.(*jinja.List)
	if !ok {
		return nil, &MessagesError{name + " must be a list"}
	}
	return l, nil
}

// continueFinalTag marks the end of the final message, as transformers'
// render_jinja_template does, to cut the render there.
const continueFinalTag = "CONTINUE_FINAL_MESSAGE_TAG "

// continueFinal renders with the final message left open: its text (its
// last text part for a list) is tagged, and the render cut at the tag.
func continueFinal(tpl *jinja.Template, src string, msgs *jinja.List, vars map[string]any) (string, error) {
	last := msgs.Items[len(msgs.Items)-1].(*jinja.Dict)
	content, _ := last.Get("content")
	if content == nil {
		return "", &MessagesError{`continue_final_message is set but the final message has no "content" to continue`}
	}
	if !strings.Contains(src, "content") {
		return "", &MessagesError{`continue_final_message is set to "content" but this is not an accepted field in the chat_template`}
	}
	tagged := jinja.NewDict()
	for _, k := range last.Keys() {
		v, _ := last.Get(k)
		tagged.Set(k, v)
	}
	var final string
	switch c := content.(type) {
	case string:
		final = c
		tagged.Set("content", c+continueFinalTag)
	case *jinja.List:
		items := append([]any(nil), c.Items...)
		found := false
		for i := len(items) - 1; i >= 0 && !found; i-- {
			p, ok := items[i].(*jinja.Dict)
			if !ok {
				continue
			}
			text, has := p.Get("text")
			s, isStr := text.(string)
			if !has || !isStr {
				continue
			}
			final, found = s, true
			np := jinja.NewDict()
			for _, k := range p.Keys() {
				v, _ := p.Get(k)
				np.Set(k, v)
			}
			np.Set("text", s+continueFinalTag)
			items[i] = np
		}
		if !found {
			return "", &MessagesError{"continue_final_message is set but we could not find any text to continue in the final message"}
		}
		tagged.Set("content", &jinja.List{Items: items})
	default:
		return "", &MessagesError{"continue_final_message: the final message's content is not text"}
	}
	chat := &jinja.List{Items: append(append([]any(nil), msgs.Items[:len(msgs.Items)-1]...), tagged)}
	vars["messages"] = chat
	out, err := render(tpl, vars)
	if err != nil {
		return "", err
	}
	tag := strings.TrimSpace(continueFinalTag)
	if !strings.Contains(out, pyStrip(final)) || !strings.Contains(out, tag) {
		return "", &TemplateError{Err: errors.New("continue_final_message is set but the final message does not appear in the chat after applying the chat template")}
	}
	loc := strings.LastIndex(out, tag)
	if strings.HasPrefix(out[loc:], continueFinalTag) {
		return out[:loc], nil
	}
	return strings.TrimRightFunc(out[:loc], pyIsSpace), nil
}

// renderSGLang is SGLang's render: add_generation_prompt is always true,
// and a final assistant message with string content becomes a user
// message, or with continue_final_message is removed and its text
// appended to the prompt.
func (t *Tokenizer) renderSGLang(tpl *jinja.Template, msgs, tools *jinja.List, vars map[string]any, continueFinal bool) (string, error) {
	prefix := ""
	items := msgs.Items
	if last := items[len(items)-1].(*jinja.Dict); true {
		role, _ := last.Get("role")
		content, _ := last.Get("content")
		if s, ok := content.(string); ok && role == "assistant" {
			if continueFinal {
				prefix = s
				items = items[:len(items)-1]
			} else {
				u := jinja.NewDict()
				u.Set("role", "user")
				u.Set("content", s)
				items = append(append([]any(nil), items[:len(items)-1]...), u)
			}
		}
	}
	vars["messages"] = &jinja.List{Items: items}
	vars["tools"] = listOrNil(tools)
	vars["add_generation_prompt"] = true
	out, err := render(tpl, vars)
	if err != nil {
		return "", err
	}
	return out + prefix, nil
}

// pyIsSpace is Python's str.isspace for one character.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// pyStrip is Python's str.strip().
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

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
