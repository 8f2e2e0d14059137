package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// Dialect is the engine whose chat preprocessing the router reproduces:
// vLLM and SGLang turn the OpenAI messages into template variables
// differently (docs/chat-rendering.md lists every rule and its source).
type Dialect int

const (
	// DialectVLLM is vLLM's parse_chat_messages (the default).
	DialectVLLM Dialect = iota
	// DialectSGLang is SGLang's _apply_jinja_template.
	DialectSGLang
)

// ParseDialect reads a dialect name: "vllm" (or "") or "sglang".
func ParseDialect(s string) (Dialect, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "vllm":
		return DialectVLLM, nil
	case "sglang":
		return DialectSGLang, nil
	}
	return 0, fmt.Errorf("chat dialect %q: want vllm or sglang", s)
}

func (d Dialect) String() string {
	if d == DialectSGLang {
		return "sglang"
	}
	return "vllm"
}

// ContentFormat is how a template wants message content: "string" (text
// parts joined into one string) or "openai" (a list of typed parts). The
// engines detect it from the template (jinja.Template.IteratesContent).
type ContentFormat string

const (
	ContentString ContentFormat = "string"
	ContentOpenAI ContentFormat = "openai"
)

// textPartField maps the content part types whose payload is text to the
// key that holds it (vLLM's MM_PARSER_MAP text entries).
var textPartField = map[string]string{
	"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking",
}

// mediaPartModality maps media part types to the modality vLLM's parser
// records; with the "openai" format the template sees {"type": modality}.
var mediaPartModality = map[string]string{
	"image_url": "image", "input_image": "image", "image_pil": "image", "image_embeds": "image",
	"audio_url": "audio", "input_audio": "audio", "audio_embeds": "audio",
	"video_url": "video",
}

func badMsg(format string, args ...any) error { return &MessagesError{fmt.Sprintf(format, args...)} }

// NormalizeMessages turns an OpenAI messages array into the conversation
// an engine hands its chat template: a pure function of the messages, the
// template's content format and the engine's dialect.
func NormalizeMessages(raw json.RawMessage, format ContentFormat, d Dialect) (*jinja.List, error) {
	msgs, err := ParseMessages(raw)
	if err != nil {
		return nil, err
	}
	out := &jinja.List{Items: make([]any, 0, len(msgs.Items))}
	for i, m := range msgs.Items {
		var conv *jinja.Dict
		if d == DialectSGLang {
			conv, err = sglangMessage(i, m.(*jinja.Dict), format)
		} else {
			conv, err = vllmMessage(i, m.(*jinja.Dict), format)
		}
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, conv)
	}
	if d == DialectVLLM {
		vllmToolCallArguments(out)
	}
	return out, nil
}

// isNone is a JSON null or a missing key.
func isNone(v any, ok bool) bool { return !ok || v == nil }

// vllmMessage is vLLM's _parse_chat_message_content: only the fields it
// names survive, content becomes a string or a list of typed parts.
func vllmMessage(i int, m *jinja.Dict, format ContentFormat) (*jinja.Dict, error) {
	role, _ := m.Get("role")
	r := role.(string)
	out := jinja.NewDict()
	out.Set("role", r)
	content, has := m.Get("content")
	var parts []any
	switch c := content.(type) {
	case nil:
	case string:
		parts = []any{c}
	case *jinja.List:
		parts = c.Items
	}
	_ = has
	texts, typed, err := vllmParts(i, parts, format)
	if err != nil {
		return nil, err
	}
	if format == ContentOpenAI {
		out.Set("content", &jinja.List{Items: typed})
	} else {
		out.Set("content", strings.Join(texts, "\n"))
	}
	switch r {
	case "assistant":
		if tc, ok := m.Get("tool_calls"); !isNone(tc, ok) {
			l, isList := tc.(*jinja.List)
			if !isList {
				return nil, badMsg("messages[%d].tool_calls must be a list", i)
			}
			out.Set("tool_calls", &jinja.List{Items: append([]any(nil), l.Items...)})
		}
		// The request model renames the deprecated reasoning_content to
		// reasoning; the template then sees both names.
		reasoning, ok := m.Get("reasoning")
		if isNone(reasoning, ok) {
			reasoning, ok = m.Get("reasoning_content")
		}
		if !isNone(reasoning, ok) {
			s, isStr := reasoning.(string)
			if !isStr {
				return nil, badMsg("messages[%d].reasoning must be a string", i)
			}
			out.Set("reasoning", s)
			out.Set("reasoning_content", s)
		}
	case "tool":
		if id, ok := m.Get("tool_call_id"); ok {
			out.Set("tool_call_id", id)
		}
		// Tool results sent as text parts become one string even for an
		// "openai" template; any other part keeps the list.
		if l, ok := out.Get("content"); ok {
			if list, isList := l.(*jinja.List); isList {
				var ts []string
				allText := true
				for _, p := range list.Items {
					pd := p.(*jinja.Dict)
					if t, _ := pd.Get("type"); t != "text" {
						allText = false
						break
					}
					s, _ := pd.Get("text")
					ts = append(ts, s.(string))
				}
				if allText {
					out.Set("content", strings.Join(ts, "\n"))
				}
			}
		}
	}
	if name, ok := m.Get("name"); ok {
		if s, isStr := name.(string); isStr {
			out.Set("name", s)
		}
	}
	if task, ok := m.Get("task"); ok {
		if s, isStr := task.(string); isStr {
			out.Set("task", s)
		}
	}
	if r == "developer" {
		tools, _ := m.Get("tools")
		out.Set("tools", tools)
	}
	return out, nil
}

// vllmParts is _parse_chat_message_content_parts: the texts (string
// format) or typed parts (openai format) of one message.
func vllmParts(i int, parts []any, format ContentFormat) ([]string, []any, error) {
	texts := []string{}
	typed := []any{}
	addText := func(s string) {
		if format != ContentOpenAI {
			texts = append(texts, s)
			return
		}
		p := jinja.NewDict()
		p.Set("type", "text")
		p.Set("text", s)
		typed = append(typed, p)
	}
	for k, part := range parts {
		if s, ok := part.(string); ok {
			addText(s)
			continue
		}
		p := part.(*jinja.Dict)
		t, _ := p.Get("type")
		typ, ok := t.(string)
		if !ok {
			return nil, nil, badMsg("messages[%d].content[%d].type must be a string", i, k)
		}
		if field, ok := textPartField[typ]; ok {
			v, has := p.Get(field)
			if isNone(v, has) {
				if typ == "text" || typ == "refusal" {
					continue // vLLM skips a text part without text
				}
				return nil, nil, badMsg("messages[%d].content[%d] (%s) has no %s", i, k, typ, field)
			}
			s, isStr := v.(string)
			if !isStr {
				return nil, nil, badMsg("messages[%d].content[%d].%s must be a string", i, k, field)
			}
			addText(s)
			continue
		}
		if typ == "tool_reference" {
			name, _ := p.Get("name")
			s, isStr := name.(string)
			if !isStr {
				return nil, nil, badMsg("messages[%d].content[%d].name must be a string", i, k)
			}
			if format != ContentOpenAI {
				texts = append(texts, s)
				continue
			}
			tr := jinja.NewDict()
			tr.Set("type", "tool_reference")
			tr.Set("name", s)
			typed = append(typed, tr)
			continue
		}
		modality, ok := mediaPartModality[typ]
		if !ok {
			return nil, nil, badMsg("messages[%d].content[%d]: unsupported content part type %q", i, k, typ)
		}
		if format != ContentOpenAI {
			// vLLM puts the model's own placeholder (from the model
			// class, not the tokenizer) before the text; the router does
			// not know it, and a text-only model refuses media anyway.
			return nil, nil, badMsg("messages[%d].content[%d]: a %s part needs the model's multimodal placeholder, which a string-format chat template does not name: use --tokenizer-mode engine for multimodal models", i, k, modality)
		}
		mp := jinja.NewDict()
		mp.Set("type", modality)
		typed = append(typed, mp)
	}
	return texts, typed, nil
}

// vllmToolCallArguments is _postprocess_messages: an assistant's empty
// tool_calls is dropped, and each call's arguments string is parsed into
// an object ({} when it is not valid JSON or not a string or object).
func vllmToolCallArguments(conv *jinja.List) {
	for _, m := range conv.Items {
		d := m.(*jinja.Dict)
		if r, _ := d.Get("role"); r != "assistant" {
			continue
		}
		tc, ok := d.Get("tool_calls")
		l, isList := tc.(*jinja.List)
		if !ok || !isList {
			continue
		}
		if len(l.Items) == 0 {
			without := jinja.NewDict()
			for _, k := range d.Keys() {
				if k != "tool_calls" {
					v, _ := d.Get(k)
					without.Set(k, v)
				}
			}
			*d = *without
			continue
		}
		for j, item := range l.Items {
			l.Items[j] = withParsedArguments(item, func(s string) any {
				v, err := jinja.FromJSON([]byte(s))
				if err != nil {
					return jinja.NewDict()
				}
				return v
			})
		}
	}
}

// withParsedArguments copies a tool call with function.arguments
// replaced (the request's values are shared and must not change).
func withParsedArguments(item any, parse func(string) any) any {
	call, ok := item.(*jinja.Dict)
	if !ok {
		return item
	}
	fn, _ := call.Get("function")
	f, ok := fn.(*jinja.Dict)
	if !ok {
		return item
	}
	nf := jinja.NewDict()
	for _, k := range f.Keys() {
		v, _ := f.Get(k)
		nf.Set(k, v)
	}
	switch a, _ := f.Get("arguments"); a.(type) {
	case string:
		nf.Set("arguments", parse(a.(string)))
	case *jinja.Dict, *jinja.List:
	default:
		nf.Set("arguments", jinja.NewDict())
	}
	nc := jinja.NewDict()
	for _, k := range call.Keys() {
		v, _ := call.Get(k)
		if k == "function" {
			v = nf
		}
		nc.Set(k, v)
	}
	return nc
}

// sglangMessage is SGLang's per-message path of _apply_jinja_template:
// the message keeps its fields (null ones dropped), content null becomes
// "", text parts join with " ", and a tool call's arguments must be a
// JSON object.
func sglangMessage(i int, m *jinja.Dict, format ContentFormat) (*jinja.Dict, error) {
	// The request model validates text parts: text is a required string.
	if c, _ := m.Get("content"); c != nil {
		if l, ok := c.(*jinja.List); ok {
			for k, p := range l.Items {
				pd, ok := p.(*jinja.Dict)
				if !ok {
					continue
				}
				if t, _ := pd.Get("type"); t == "text" || t == "input_text" {
					if text, _ := pd.Get("text"); text == nil {
						return nil, badMsg("messages[%d].content[%d].text must be a string", i, k)
					} else if _, isStr := text.(string); !isStr {
						return nil, badMsg("messages[%d].content[%d].text must be a string", i, k)
					}
				}
			}
		}
	}
	out := jinja.NewDict()
	for _, k := range m.Keys() {
		v, _ := m.Get(k)
		if v == nil && k != "content" {
			continue
		}
		out.Set(k, v)
	}
	role, _ := m.Get("role")
	if c, ok := m.Get("content"); !ok || c == nil {
		out.Set("content", "")
	}
	if role == "assistant" {
		if tc, ok := out.Get("tool_calls"); ok {
			if l, isList := tc.(*jinja.List); isList {
				calls := &jinja.List{Items: make([]any, len(l.Items))}
				for j, item := range l.Items {
					var perr error
					calls.Items[j] = withParsedArguments(item, func(s string) any {
						v, err := jinja.FromJSON([]byte(s))
						if err != nil {
							perr = badMsg("messages[%d].tool_calls[%d]: function.arguments must be valid JSON", i, j)
							return nil
						}
						if _, isObj := v.(*jinja.Dict); !isObj {
							perr = badMsg("messages[%d].tool_calls[%d]: function.arguments must be a JSON object", i, j)
						}
						return v
					})
					if perr != nil {
						return nil, perr
					}
				}
				out.Set("tool_calls", calls)
			}
		}
	}
	list, isList := out.Get("content")
	parts, _ := list.(*jinja.List)
	if !isList || parts == nil {
		return out, nil
	}
	if format == ContentOpenAI {
		typed := []any{}
		for _, p := range parts.Items {
			pd, ok := p.(*jinja.Dict)
			if !ok {
				continue
			}
			t, _ := pd.Get("type")
			switch t {
			case "image_url", "input_image", "video_url", "audio_url":
				mp := jinja.NewDict()
				mp.Set("type", mediaPartModality[t.(string)])
				typed = append(typed, mp)
			case "text", "input_text":
				tp := jinja.NewDict()
				tp.Set("type", "text")
				text, _ := pd.Get("text")
				tp.Set("text", text)
				typed = append(typed, tp)
			case "tool_reference":
				typed = append(typed, pd)
			}
		}
		out.Set("content", &jinja.List{Items: typed})
	} else {
		var texts []string
		for _, p := range parts.Items {
			if pd, ok := p.(*jinja.Dict); ok {
				if t, _ := pd.Get("type"); t == "text" || t == "input_text" {
					text, _ := pd.Get("text")
					s, isStr := text.(string)
					if !isStr {
						return nil, badMsg("messages[%d]: a text part's text must be a string", i)
					}
					texts = append(texts, s)
				}
			}
		}
		out.Set("content", strings.Join(texts, " "))
	}
	// A tool result made only of text parts becomes one string.
	if role == "tool" {
		if l, ok := out.Get("content"); ok {
			if list, isList := l.(*jinja.List); isList {
				var ts []string
				for _, p := range list.Items {
					pd := p.(*jinja.Dict)
					if t, _ := pd.Get("type"); t != "text" {
						return out, nil
					}
					s, _ := pd.Get("text")
					ts = append(ts, fmt.Sprint(s))
				}
				out.Set("content", strings.Join(ts, " "))
			}
		}
	}
	return out, nil
}

// NormalizeTools is the tools list as the engine hands it to the
// template. vLLM validates each tool into its request model and dumps
// it: {"type": "function", "function": {"name", "description",
// "parameters", then any other function keys}}, with description and
// parameters null when absent and other tool-level keys dropped.
// SGLang passes its own model's dump, which the router does not
// reproduce key by key: the list is used as sent.
func NormalizeTools(raw json.RawMessage, d Dialect) (*jinja.List, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	v, err := jinja.FromJSON(raw)
	if err != nil {
		return nil, badMsg("tools: malformed JSON: %v", err)
	}
	l, ok := v.(*jinja.List)
	if !ok {
		return nil, badMsg("tools must be a list")
	}
	if d == DialectSGLang {
		return l, nil
	}
	if len(l.Items) == 0 {
		return nil, badMsg("tools must not be an empty array: give at least one tool or omit the field")
	}
	out := &jinja.List{Items: make([]any, len(l.Items))}
	for i, t := range l.Items {
		td, ok := t.(*jinja.Dict)
		if !ok {
			return nil, badMsg("tools[%d] must be an object", i)
		}
		if typ, has := td.Get("type"); has && typ != "function" {
			return nil, badMsg("tools[%d].type must be \"function\"", i)
		}
		fn, _ := td.Get("function")
		f, ok := fn.(*jinja.Dict)
		if !ok {
			return nil, badMsg("tools[%d].function must be an object", i)
		}
		name, _ := f.Get("name")
		if _, ok := name.(string); !ok {
			return nil, badMsg("tools[%d].function.name must be a string", i)
		}
		nf := jinja.NewDict()
		nf.Set("name", name)
		for _, k := range []string{"description", "parameters"} {
			v, _ := f.Get(k)
			nf.Set(k, v)
		}
		for _, k := range f.Keys() {
			switch k {
			case "name", "description", "parameters":
				continue
			case "defer_loading":
				if v, _ := f.Get(k); v == nil {
					continue
				}
			}
			v, _ := f.Get(k)
			nf.Set(k, v)
		}
		if dl, has := td.Get("defer_loading"); has && dl != nil {
			if cur, _ := nf.Get("defer_loading"); cur == nil {
				nf.Set("defer_loading", dl)
			}
		}
		nt := jinja.NewDict()
		nt.Set("type", "function")
		nt.Set("function", nf)
		if dl, has := td.Get("defer_loading"); has && dl != nil {
			nt.Set("defer_loading", dl)
		}
		out.Items[i] = nt
	}
	return out, nil
}
