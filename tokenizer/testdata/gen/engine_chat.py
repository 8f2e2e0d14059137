"""The chat preprocessing of vLLM and SGLang, and transformers'
apply_chat_template(tokenize=False), restated in plain Python from the
engines' source (no engine is installed here), to make reference renders
with the Jinja2 that the engines render with.

Sources (read at these revisions; docs/chat-rendering.md cites each rule):
  vLLM  vllm/entrypoints/chat_utils.py             001eadcf
        vllm/renderers/hf.py                       02e64f58
        vllm/entrypoints/openai/chat_completion/protocol.py  002032ee
        vllm/renderers/params.py (merge_kwargs)    017638d7
  SGLang python/sglang/srt/entrypoints/openai/serving_chat.py  002897c2
        python/sglang/srt/parser/jinja_template_utils.py       0b9c3848
  transformers src/transformers/utils/chat_template_utils.py
        (_compile_jinja_template, render_jinja_template)
"""

import copy
import json
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class RequestError(Exception):
    """The engine answers 400: a malformed request or a template error."""


class RaisedError(jinja2.exceptions.TemplateError):
    """The template called raise_exception."""


# ---------------------------------------------------------------- Jinja2


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} tag (renders its body)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def environment():
    """The environment of transformers' _compile_jinja_template."""

    def raise_exception(message):
        raise RaisedError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = environment()


# ------------------------------------------------- content format detection


def _var_access(node, name):
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name


def _attr_access(node, name, key):
    if isinstance(node, jinja2.nodes.Getitem):
        return _var_access(node.node, name) and isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == key
    if isinstance(node, jinja2.nodes.Getattr):
        return _var_access(node.node, name) and node.attr == key
    return False


def _var_or_elems(node, name, key=None):
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _var_or_elems(node.node, name, key)
    if isinstance(node, jinja2.nodes.Test):
        return _var_or_elems(node.node, name, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _var_or_elems(node.node, name, key)
    return _attr_access(node, name, key) if key else _var_access(node, name)


def vllm_content_format(template):
    """vLLM: "openai" when a loop iterates message.content where message
    loops over messages (or a variable assigned from it)."""
    try:
        ast = ENV.parse(template)
        names, queue = ["messages"], ["messages"]
        while queue:
            related = queue.pop(0)
            for assign in ast.find_all(jinja2.nodes.Assign):
                if _var_or_elems(assign.node, related):
                    assert isinstance(assign.target, jinja2.nodes.Name)
                    names.append(assign.target.name)
                    if assign.target.name != related and assign.target.name not in queue and assign.target.name not in names[:-1]:
                        queue.append(assign.target.name)
        message_vars = []
        for loop in ast.find_all(jinja2.nodes.For):
            if any(_var_or_elems(loop.iter, n) for n in names):
                assert isinstance(loop.target, jinja2.nodes.Name)
                message_vars.append(loop.target.name)
        for loop in ast.find_all(jinja2.nodes.For):
            if any(_var_or_elems(loop.iter, v, "content") for v in message_vars):
                assert isinstance(loop.target, jinja2.nodes.Name)
                return "openai"
        return "string"
    except Exception:
        return "string"


def sglang_content_format(template):
    if any(w in template for w in ("image", "audio", "video", "vision")):
        return "openai"
    try:
        ast = ENV.parse(template)
    except Exception:
        return "string"
    for loop in ast.find_all(jinja2.nodes.For):
        for v in ("message", "msg", "m"):
            if _var_or_elems(loop.iter, v, "content"):
                return "openai"
    return "string"


# ------------------------------------------------------------------ vLLM

TEXT_FIELDS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}
MEDIA = {
    "image_url": "image", "input_image": "image", "image_pil": "image", "image_embeds": "image",
    "audio_url": "audio", "input_audio": "audio", "audio_embeds": "audio", "video_url": "video",
}


def _vllm_parts(parts, fmt):
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append({"type": "text", "text": part} if fmt == "openai" else part)
            continue
        ptype = part.get("type")
        if ptype in TEXT_FIELDS:
            text = part.get(TEXT_FIELDS[ptype])
            if text is None:
                if ptype in ("text", "refusal"):
                    continue
                raise RequestError(f"{ptype} part without text")
            if not isinstance(text, str):
                raise RequestError("text part is not a string")
            out.append({"type": "text", "text": text} if fmt == "openai" else text)
        elif ptype == "tool_reference":
            out.append({"type": "tool_reference", "name": part["name"]} if fmt == "openai" else part["name"])
        elif ptype in MEDIA:
            if fmt != "openai":
                # A string-format template gets the model class's own
                # placeholder; text-only models refuse media.
                raise RequestError("media part needs a multimodal model's placeholder")
            out.append({"type": MEDIA[ptype]})
        else:
            raise RequestError(f"Unsupported chat content part type: {ptype!r}")
    return out


def vllm_messages(messages, fmt):
    """parse_chat_messages + _postprocess_messages."""
    conversation = []
    for msg in messages:
        msg = copy.deepcopy(msg)
        # protocol.py _normalize_messages_before: reasoning_content -> reasoning
        rc = msg.pop("reasoning_content", None)
        if rc is not None and msg.get("reasoning") is None:
            msg["reasoning"] = rc
        role = msg["role"]
        content = msg.get("content")
        if content is None:
            content = []
        elif isinstance(content, str):
            content = [{"type": "text", "text": content}]
        parts = _vllm_parts(content, fmt)
        out = {"role": role, "content": parts if fmt == "openai" else "\n".join(parts)}
        if role == "assistant":
            if msg.get("tool_calls") is not None:
                out["tool_calls"] = list(msg["tool_calls"])
            if msg.get("reasoning") is not None:
                out["reasoning"] = msg["reasoning"]
                out["reasoning_content"] = msg["reasoning"]
        elif role == "tool":
            if "tool_call_id" in msg:
                out["tool_call_id"] = msg["tool_call_id"]
            c = out.get("content")
            if isinstance(c, list):
                if not any(isinstance(i, dict) and i.get("type") != "text" for i in c):
                    texts = [i.get("text", "") for i in c if isinstance(i, dict) and i.get("type") == "text"]
                    out["content"] = "\n".join(texts) if texts else ""
        if isinstance(msg.get("name"), str):
            out["name"] = msg["name"]
        if isinstance(msg.get("task"), str):
            out["task"] = msg["task"]
        if role == "developer":
            out["tools"] = msg.get("tools", None)
        conversation.append(out)
    for m in conversation:
        if m["role"] == "assistant" and "tool_calls" in m:
            calls = m["tool_calls"]
            if not isinstance(calls, list):
                continue
            if not calls:
                m.pop("tool_calls")
                continue
            for item in calls:
                args = item["function"].get("arguments")
                if isinstance(args, str):
                    try:
                        item["function"]["arguments"] = json.loads(args)
                    except json.JSONDecodeError:
                        item["function"]["arguments"] = {}
                elif not isinstance(args, (dict, list)):
                    item["function"]["arguments"] = {}
    return conversation


def vllm_tools(tools):
    """ChatCompletionToolsParam.model_dump(): type, function {name,
    description, parameters, extra keys}; absent description and
    parameters are None."""
    if tools is None:
        return None
    if tools == []:
        raise RequestError("`tools` must not be an empty array")
    out = []
    for t in tools:
        f = t["function"]
        fn = {"name": f["name"], "description": f.get("description"), "parameters": f.get("parameters")}
        for k, v in f.items():
            if k in fn or (k == "defer_loading" and v is None):
                continue
            fn[k] = v
        out.append({"type": "function", "function": fn})
    return out


# ---------------------------------------------------------------- SGLang


def sglang_messages(messages, fmt):
    out = []
    for msg in copy.deepcopy(messages):
        # The request model validates text parts: text is a required string.
        for chunk in msg.get("content") if isinstance(msg.get("content"), list) else []:
            if isinstance(chunk, dict) and chunk.get("type") in ("text", "input_text") and not isinstance(chunk.get("text"), str):
                raise RequestError("a text part's text must be a string")
        if msg.get("role") == "assistant" and isinstance(msg.get("tool_calls"), list):
            for item in msg["tool_calls"]:
                fn = item.get("function") if isinstance(item, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                    try:
                        parsed = json.loads(fn["arguments"])
                    except json.JSONDecodeError:
                        raise RequestError("Assistant tool call function.arguments must be valid JSON.")
                    if not isinstance(parsed, dict):
                        raise RequestError("Assistant tool call function.arguments must be a JSON object.")
                    fn["arguments"] = parsed
        if msg.get("content") is None:
            msg["content"] = ""
        content = msg["content"]
        if not isinstance(content, list):
            m = {k: v for k, v in msg.items() if v is not None}
        elif fmt == "openai":
            parts = []
            for chunk in content:
                if not isinstance(chunk, dict):
                    continue
                t = chunk.get("type")
                if t in ("image_url", "input_image"):
                    parts.append({"type": "image"})
                elif t == "video_url":
                    parts.append({"type": "video"})
                elif t == "audio_url":
                    parts.append({"type": "audio"})
                elif t in ("text", "input_text"):
                    parts.append({"type": "text", "text": chunk["text"]})
                elif t == "tool_reference":
                    parts.append(chunk)
            m = {k: v for k, v in msg.items() if v is not None and k != "content"}
            m["content"] = parts
        else:
            texts = [c["text"] for c in content if isinstance(c, dict) and c.get("type") in ("text", "input_text")]
            m = dict(msg)
            m["content"] = " ".join(texts) if texts else ""
            m = {k: v for k, v in m.items() if v is not None}
        if m.get("role") == "tool" and isinstance(m.get("content"), list):
            parts = m["content"]
            if all((isinstance(p, dict) and p.get("type") == "text") or isinstance(p, str) for p in parts):
                m["content"] = " ".join(p.get("text", "") if isinstance(p, dict) else p for p in parts)
        out.append(m)
    return out


# ---------------------------------------------------------- rendering

CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
CONSUMED = {"padding", "truncation", "max_length", "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs", "continue_final_message"}


def render_transformers(template, special, chat, tools, documents, add_generation_prompt, continue_final_message, kwargs):
    """apply_chat_template(tokenize=False) / render_jinja_template."""
    if continue_final_message and add_generation_prompt:
        raise RequestError("continue_final_message and add_generation_prompt are not compatible")
    compiled = ENV.from_string(template)
    if continue_final_message:
        chat = copy.deepcopy(chat)
        final = chat[-1].get("content")
        if final is None:
            raise RequestError("final message has no content")
        if "content" not in template:
            raise RequestError("content is not an accepted field in the chat_template")
        if isinstance(final, (list, tuple)):
            for block in reversed(final):
                if "text" in block:
                    final = block["text"]
                    block["text"] = block["text"] + CONTINUE_TAG
                    break
            else:
                raise RequestError("no text to continue in the final message")
        else:
            chat[-1]["content"] = chat[-1]["content"] + CONTINUE_TAG
    template_kwargs = {**special, **kwargs}
    try:
        rendered = compiled.render(
            messages=chat, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt, **template_kwargs
        )
    except RaisedError as e:
        raise RequestError(f"raised: {e}")
    except (jinja2.TemplateError, TypeError) as e:
        raise RequestError(f"template: {e}")
    if continue_final_message:
        if final.strip() not in rendered or CONTINUE_TAG.strip() not in rendered:
            raise RequestError("final message does not appear in the chat")
        loc = rendered.rindex(CONTINUE_TAG.strip())
        if rendered[loc : loc + len(CONTINUE_TAG)] == CONTINUE_TAG:
            rendered = rendered[:loc]
        else:
            rendered = rendered[:loc].rstrip()
    return rendered


def vllm_render(template, special, req):
    """vLLM's chat path: request fields, build_chat_params' kwargs merge,
    parse_chat_messages, resolve_chat_template_kwargs, apply_chat_template."""
    user = dict(req.get("chat_template_kwargs") or {})
    for k in ("chat_template", "tokenize"):
        if k in user:
            raise RequestError(f"unexpected chat template kwarg {k}")
    if "tools" in user or "messages" in user or "conversation" in user:
        raise RequestError("kwarg collides with an apply_chat_template argument")
    add_gen = req.get("add_generation_prompt", True)
    cont = req.get("continue_final_message", False)
    if req.get("continue_final_message") and req.get("add_generation_prompt"):
        raise RequestError("Cannot set both continue_final_message and add_generation_prompt")
    extra = {"add_generation_prompt": add_gen, "continue_final_message": cont, "documents": req.get("documents"), "reasoning_effort": req.get("reasoning_effort")}
    if req.get("reasoning_effort") is not None and "enable_thinking" not in user:
        extra["enable_thinking"] = req["reasoning_effort"] != "none"
    merged = {**user, **{k: v for k, v in extra.items() if v is not None and v != "auto"}}
    fmt = vllm_content_format(template)
    conversation = vllm_messages(req["messages"], fmt)
    tools = vllm_tools(req.get("tools"))
    add_gen = merged.pop("add_generation_prompt", False)
    cont = merged.pop("continue_final_message", False)
    documents = merged.pop("documents", None)
    kwargs = {k: v for k, v in merged.items() if k not in CONSUMED}
    return render_transformers(template, special, conversation, tools, documents, add_gen, cont, kwargs), fmt


def sglang_render(template, special, req):
    fmt = sglang_content_format(template)
    msgs = sglang_messages(req["messages"], fmt)
    prefix = None
    if msgs and msgs[-1].get("role") == "assistant" and isinstance(msgs[-1].get("content"), str):
        if req.get("continue_final_message"):
            prefix = msgs[-1]["content"]
            msgs = msgs[:-1]
        else:
            msgs[-1] = {"role": "user", "content": msgs[-1]["content"]}
    kwargs = {}
    if req.get("reasoning_effort") is not None:
        kwargs["reasoning_effort"] = req["reasoning_effort"]
    kwargs.update(req.get("chat_template_kwargs") or {})
    if "add_generation_prompt" in kwargs:
        raise RequestError("add_generation_prompt is set by the engine")
    documents = kwargs.pop("documents", None)
    kwargs = {k: v for k, v in kwargs.items() if k not in CONSUMED}
    rendered = render_transformers(template, special, msgs, req.get("tools"), documents, True, False, kwargs)
    return rendered + (prefix or ""), fmt
