// Generates the tokenizer package's reference data from the reference
// implementations, run under node:
//
//   golden/<model>.json       token ids from @lenml/tokenizers (a fork of
//                             transformers.js) over the corpus below and 200
//                             seeded random strings per tokenizer
//   golden/long.json          token ids of long runs (one character
//                             repeated, spaces, digits): the words the
//                             merge loop spends most on
//   golden/chat.json          chat renders from @huggingface/jinja with each
//                             model's own template, and their token ids
//   ../unicode_tables.go      the Unicode classes the split regexes use, as
//                             node's regex engine (ICU) sees them
//
// Run `make tokenizer-fixtures` (it fetches the packages first). The output
// is deterministic for a given set of package versions and node's Unicode
// version; commit it.
"use strict";

const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");
const { Template } = require("@huggingface/jinja");

const here = __dirname;
const repo = path.resolve(here, "../../..");
const cache = process.env.KVROUTER_NPM_CACHE || path.join(repo, ".cache/npm");
const outDir = path.join(here, "..", "golden");
fs.mkdirSync(outDir, { recursive: true });

const MODELS = ["qwen3", "llama3_1", "deepseek_v3", "gemma3", "gptoss", "llama2"];
const pkgVersion = (name) =>
  JSON.parse(fs.readFileSync(path.join(cache, "node_modules", name, "package.json"), "utf8")).version;
const lenmlVersion = pkgVersion("@lenml/tokenizers");
const jinjaVersion = pkgVersion("@huggingface/jinja");

// ---------- deterministic randomness ----------
function mulberry32(seed) {
  return function () {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
function seedOf(s) {
  let h = 2166136261;
  for (const c of s) h = Math.imul(h ^ c.codePointAt(0), 16777619);
  return h >>> 0;
}

// ---------- corpus ----------
const englishSentences = [
  "The router keeps a radix tree of every block each worker holds.",
  "When a request arrives, its prompt is hashed block by block and matched against that tree.",
  "A worker that already holds a long prefix can skip most of the prefill, which is the expensive part.",
  "Load matters too: a worker with a deep queue answers slowly even when its cache is warm.",
  "So the cost of sending a request somewhere is a weighted sum of the blocks it must compute and the work already waiting there.",
  "Engines publish events when they store or evict blocks, and the index follows them closely.",
  "It's not magic; it's bookkeeping, done carefully and quickly.",
  "We measured 3,421 decisions per second on two cores, with a p99 of 0.39 ms.",
  "Don't forget that the chat template changes the prompt's first tokens, and they'll shift every hash after them.",
  "In 2024, fleets of 64 or 128 GPUs were common; by now they're often larger.",
  "Each replica reads every event itself, so a late replica replays the stream before it answers.",
  "\"Quoted text,\" she said, \"must tokenize exactly like the engine does.\"",
  "Numbers such as 1234567, 3.14159 and 2.5e-3 are split into small groups of digits.",
  "Conversations grow turn by turn: the second turn repeats the first and adds a little.",
  "Whitespace matters    too, and so do tabs\tand new lines.\n",
  "URLs like https://example.com/path?q=1&r=2 and paths like /usr/local/bin are common in prompts.",
  "The model answered: \"I can't see the file you mentioned; could you paste it?\"",
  "Latency percentiles hide the tail; always look at p99 and the maximum.",
];
const chineseSentences = [
  "路由器为每个工作节点维护一棵基数树，记录它缓存了哪些数据块。",
  "请求到达时，提示词被逐块哈希，并与这棵树进行匹配。",
  "已经持有较长前缀的节点可以跳过大部分预填充计算，这正是最耗时的部分。",
  "负载同样重要：队列很深的节点即使缓存命中，响应也会变慢。",
  "引擎在存储或淘汰数据块时发布事件，索引会紧紧跟随这些事件。",
  "对话是一轮一轮增长的，第二轮会重复第一轮的内容，再加上一点新的。",
  "我们在两个核心上测得每秒三千多次决策，延迟的第九十九百分位约为零点四毫秒。",
  "分词必须与推理引擎完全一致，否则一个词元的差异就会改变之后所有块的哈希值。",
  "日本語の文章も混ざることがあります。カタカナとひらがな、そして漢字。",
];

function composeDocument(sentences, targetChars, seed, sep) {
  const rnd = mulberry32(seed);
  let out = "";
  while (out.length < targetChars) {
    out += sentences[Math.floor(rnd() * sentences.length)] + sep;
    if (rnd() < 0.15) out += "\n\n";
  }
  return out;
}
const benchEnglish = composeDocument(englishSentences, 17000, 7, " ");
const benchChinese = composeDocument(chineseSentences, 6000, 11, "");
fs.writeFileSync(path.join(outDir, "bench_en.txt"), benchEnglish);
fs.writeFileSync(path.join(outDir, "bench_zh.txt"), benchChinese);

const fixed = [
  "",
  "Hello world",
  "Hello, world! How are you doing today?",
  " leading space",
  "   three leading spaces",
  "trailing spaces   ",
  "I'm sure you'll like it; they've said it's fine, and we'd agree. DON'T SHOUT, I'LL LISTEN. 'S 'LL 'Re",
  "the cat's toy, the dogs' toys, rock 'n' roll, ''quoted''",
  "0 1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 -42 +7 1e10 0x1F 12abc34 ٣٤٥ ４５６",
  "2024-11-24T07:16:19Z, 10:30am, $1,299.99, 50%, #1, v1.2.3",
  "你好，世界！这是一个测试。",
  "日本語のテキストとカタカナ、ひらがな。東京タワー",
  "한국어 문장입니다. 안녕하세요!",
  "Привет, мир! Это тест.",
  "مرحبا بالعالم! هذا اختبار.",
  "नमस्ते दुनिया! यह एक परीक्षण है।",
  "สวัสดีชาวโลก นี่คือการทดสอบ",
  "Ελληνικά κείμενα και ΚΕΦΑΛΑΙΑ",
  "🙂👍🏽👨‍👩‍👧‍👦🇫🇷 ❤️ 🤖🚀✨ emoji mixed with text 😀!",
  "Café naïve résumé coöperate Cafe\u0301 e\u0301\u0302 A\u030a \u1100\u1161\u11a8 ﬁ ﬀ Ω Å",
  "ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ and\u00a0nbsp\u3000ideographic\u2028line\u2029para\u0085nel\ufeffbom\u000bvt\u000cff",
  "a" + " ".repeat(40) + "b",
  " ".repeat(100),
  "\n\n\n\n",
  "\t\t\t  \n  \r\n  \r\r\n\n x",
  "x \n\n \n y  \n",
  "line one\nline two\r\nline three\n\n\nline six",
  "func main() {\n\tfmt.Println(\"hello\")\n\tfor i := 0; i < 10; i++ {\n\t\tx += i * 2 // comment\n\t}\n}\n",
  "def f(x):\n    if x > 0:\n        return x ** 2\n    return -x\n\n\nprint(f(3))\n",
  "{\"key\": \"value\", \"list\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
  "<html><body class=\"x\">Hi &amp; bye</body></html>",
  "SELECT * FROM users WHERE id = 42 AND name LIKE '%o%';",
  "https://example.com/a/b?c=d&e=f#g /usr/local/bin/go ~/.config C:\\Windows\\System32",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
  "<|im_start|<|im_end|> <|im_start|x <|endoftext|> <|endoftext|><|endoftext|>",
  "<s> </s> <unk> <s>[INST] hi [/INST]",
  "<bos><eos><start_of_turn>user\nhello<end_of_turn>\n<pad> <mask> <unused0>",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
  "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>",
  "<|start|>system<|message|>hi<|end|><|return|> <|channel|>",
  "<|reserved_special_token_5|> < |im_start| > <<|im_end|>> [INST] <<SYS>>",
  "▁already ▁▁marked ▁ words▁",
  "UPPER lower MiXeD camelCase snake_case kebab-case PascalCase HTTPServer iPhone",
  "!!! ??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} ||| ;;; ::: ''' \"\"\" ``` ~~~",
  "a\u0301\u0302\u0303 \u0301\u0301 x\u200dy z\u200bw \u00ad",
  englishSentences.join(" "),
  chineseSentences.join(""),
  benchEnglish,
  benchChinese,
];

// Random strings from a palette of interesting pieces and random code points.
const palette = [
  "a", "b", "Z", "the", " the", "The", "hello", " world", "I", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL",
  "'", "\"", "0", "7", "42", "123", "4567", ".", ",", "!", "?", ";", ":", "-", "_", "/", "\\", "(", ")", "[", "]", "{", "}",
  "<", ">", "|", "#", "$", "%", "&", "*", "+", "=", "@", "^", "`", "~",
  " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u3000", "\u2028", "\u0085", "\ufeff", "\u000b", "\u000c",
  "你", "好", "世界", "。", "，", "日本", "カタカナ", "ひらがな", "한국", "Ω", "é", "e\u0301", "\u0301", "\u0308", "ß", "İ", "ﬁ",
  "🙂", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "\u200d", "\u200b",
  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>", "<bos>", "<eos>", "<start_of_turn>",
  "<|begin_of_text|>", "<|eot_id|>", "<｜begin▁of▁sentence｜>", "<|start|>", "<|message|>", "<|im_", "|>", "<|", "▁", "▁▁",
  "Привет", "مرحبا", "नमस्ते", "ไทย", "١٢٣", "Ⅻ", "½", "²",
];
function randomCodePoint(rnd) {
  const r = rnd();
  let cp;
  if (r < 0.5) cp = Math.floor(rnd() * 0x10000);
  else if (r < 0.8) cp = 0x10000 + Math.floor(rnd() * 0x20000);
  else cp = Math.floor(rnd() * 0x110000);
  if (cp >= 0xd800 && cp <= 0xdfff) cp = 0x20; // no lone surrogates: they are not valid UTF-8
  return String.fromCodePoint(cp);
}
function randomString(rnd) {
  const n = 1 + Math.floor(rnd() * 30);
  let s = "";
  for (let i = 0; i < n; i++) {
    const r = rnd();
    if (r < 0.65) s += palette[Math.floor(rnd() * palette.length)];
    else if (r < 0.8) s += String.fromCharCode(0x20 + Math.floor(rnd() * 0x5f));
    else s += randomCodePoint(rnd);
  }
  return s;
}

function loadModel(name) {
  const d = path.join(cache, "tokenizers", name);
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(d, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(d, "tokenizer_config.json"), "utf8"));
  return { tokenizerJSON, tokenizerConfig };
}

// ---------- token fixtures ----------
function tokenFixtures(name, data, variant) {
  const tok = TokenizerLoader.fromPreTrained(data);
  const rnd = mulberry32(seedOf(variant || name));
  const texts = fixed.slice();
  for (let i = 0; i < 200; i++) texts.push(randomString(rnd));
  const cases = texts.map((text) => ({
    text,
    ids: tok.encode(text),
    ids_no_special: tok.encode(text, { add_special_tokens: false }),
  }));
  return {
    generator: `@lenml/tokenizers ${lenmlVersion} under node ${process.version} (Unicode ${process.versions.unicode})`,
    model: variant || name,
    cases,
  };
}

// ---------- chat fixtures ----------
const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", description: "City name, e.g. Paris" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      },
      required: ["city"],
    },
  },
};
const conversations = [
  { name: "single_user", messages: [{ role: "user", content: "Hello! What can you do?" }], add_generation_prompt: true },
  {
    name: "system_user",
    messages: [
      { role: "system", content: "You are a helpful assistant." },
      { role: "user", content: "Summarize: the router hashes prompts into blocks." },
    ],
    add_generation_prompt: true,
  },
  {
    name: "multi_turn",
    messages: [
      { role: "user", content: "What is KV caching?" },
      { role: "assistant", content: "It keeps attention keys and values of earlier tokens so they are not recomputed." },
      { role: "user", content: "  And prefix caching?  \n" },
    ],
    add_generation_prompt: true,
  },
  {
    name: "multi_turn_no_generation_prompt",
    messages: [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello!" },
    ],
    add_generation_prompt: false,
  },
  {
    name: "unicode",
    messages: [
      { role: "user", content: "你好！请用中文回答。🙂 Café naïve\n\n\tindent" },
      { role: "assistant", content: "好的 👍" },
      { role: "user", content: "<|im_start|> is not a tag here; nor is <bos>." },
    ],
    add_generation_prompt: true,
  },
  {
    name: "thinking",
    messages: [
      { role: "user", content: "2+2?" },
      { role: "assistant", content: "<think>\nSimple sum.\n</think>\n\n4" },
      { role: "user", content: "3+3?" },
    ],
    add_generation_prompt: true,
  },
  {
    name: "thinking_disabled",
    messages: [{ role: "user", content: "Quick answer please." }],
    add_generation_prompt: true,
    chat_template_kwargs: { enable_thinking: false },
  },
  {
    name: "tools",
    messages: [
      { role: "system", content: "You can call tools." },
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Paris\"}" } },
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: "{\"temp\": 21, \"sky\": \"clear\"}" },
    ],
    tools: [weatherTool],
    add_generation_prompt: true,
  },
  {
    name: "tools_empty_content",
    messages: [
      { role: "user", content: "Weather in Paris and Rome?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "get_weather", arguments: { city: "Paris", unit: "celsius" } } },
          { id: "call_2", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Rome\"}" } },
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: "21C" },
      { role: "tool", tool_call_id: "call_2", content: "25C" },
      { role: "user", content: "<tool_response>\nnot really\n</tool_response>" },
    ],
    tools: [weatherTool, { type: "function", function: { name: "noop", description: "Does nothing", parameters: { type: "object", properties: {} } } }],
    add_generation_prompt: true,
  },
  {
    name: "content_parts",
    messages: [
      { role: "user", content: [{ type: "text", text: "Describe this:" }, { type: "text", text: " a plain text part " }] },
    ],
    add_generation_prompt: true,
  },
  {
    name: "roles_not_alternating",
    messages: [
      { role: "user", content: "one" },
      { role: "user", content: "two" },
    ],
    add_generation_prompt: true,
  },
];

// A template exercising the Jinja features chat templates use, rendered
// the same way (tokenized with qwen3).
const featuresTemplate = fs.readFileSync(path.join(here, "features.jinja"), "utf8");

function specialTokens(config) {
  const out = {};
  for (const k of ["bos_token", "eos_token", "unk_token", "pad_token"]) {
    const v = config[k];
    if (v === undefined || v === null) continue;
    out[k] = typeof v === "object" ? v.content : v;
  }
  return out;
}

function render(template, config, conv) {
  const ctx = Object.assign(
    {},
    specialTokens(config),
    conv.chat_template_kwargs || {},
    {
      messages: conv.messages,
      tools: conv.tools === undefined ? null : conv.tools,
      documents: null,
      add_generation_prompt: !!conv.add_generation_prompt,
    }
  );
  try {
    return { rendered: new Template(template).render(ctx) };
  } catch (e) {
    return { error: String(e.message || e) };
  }
}

function chatFixtures(models) {
  const out = [];
  const all = Object.entries(models)
    .filter(([, m]) => typeof m.data.tokenizerConfig.chat_template === "string")
    .map(([name, m]) => ({ name, template: m.data.tokenizerConfig.chat_template, m }));
  all.push({ name: "features", tokenizer: "qwen3", template: featuresTemplate, m: models.qwen3 });
  for (const { name, template, m, tokenizer } of all) {
    for (const conv of conversations) {
      const r = render(template, m.data.tokenizerConfig, conv);
      const c = {
        model: name,
        tokenizer: tokenizer || name,
        name: conv.name,
        messages: conv.messages,
        tools: conv.tools,
        add_generation_prompt: !!conv.add_generation_prompt,
        chat_template_kwargs: conv.chat_template_kwargs,
      };
      if (r.error !== undefined) c.error = r.error;
      else {
        c.rendered = r.rendered;
        c.ids = m.tok.encode(r.rendered, { add_special_tokens: false });
      }
      out.push(c);
    }
  }
  return { generator: `@huggingface/jinja ${jinjaVersion}, @lenml/tokenizers ${lenmlVersion}`, cases: out };
}

// ---------- Unicode tables ----------
const classes = [
  ["clsL", /\p{L}/u], ["clsN", /\p{N}/u], ["clsM", /\p{M}/u], ["clsP", /\p{P}/u], ["clsS", /\p{S}/u],
  ["clsLu", /\p{Lu}/u], ["clsLt", /\p{Lt}/u], ["clsLm", /\p{Lm}/u], ["clsLo", /\p{Lo}/u], ["clsLl", /\p{Ll}/u],
  ["clsSpace", /\s/u],
];
function unicodeTables() {
  const ranges = [];
  let lo = 0, prev = -1;
  const bitsOf = (cp) => {
    if (cp >= 0xd800 && cp <= 0xdfff) return 0;
    const s = String.fromCodePoint(cp);
    let b = 0;
    classes.forEach(([, re], i) => { if (re.test(s)) b |= 1 << i; });
    return b;
  };
  for (let cp = 0; cp <= 0x110000; cp++) {
    const b = cp === 0x110000 ? -2 : bitsOf(cp);
    if (b !== prev) {
      if (prev > 0) ranges.push([lo, cp - 1, prev]);
      lo = cp;
      prev = b;
    }
  }
  const names = (b) => classes.filter((_, i) => b & (1 << i)).map(([n]) => n).join(" | ");
  let go = "// Code generated by tokenizer/testdata/gen/gen.js; DO NOT EDIT.\n\n";
  go += "package tokenizer\n\n";
  go += `// unicodeVersion is the Unicode version of the classes below: that of the\n`;
  go += `// reference implementation's regex engine (node ${process.version}, ICU ${process.versions.icu}).\n`;
  go += `const unicodeVersion = "${process.versions.unicode}"\n\n`;
  go += "// classRanges lists, in order, the code point ranges that belong to at\n";
  go += "// least one class (\\p{L}, \\p{N}, ..., JavaScript's \\s), with their classes.\n";
  go += "var classRanges = [...]classRange{\n";
  for (const [a, b, bits] of ranges) {
    go += `\t{0x${a.toString(16)}, 0x${b.toString(16)}, ${names(bits)}},\n`;
  }
  go += "}\n";
  fs.writeFileSync(path.join(here, "..", "..", "unicode_tables.go"), go);
  return ranges.length;
}

// The Metaspace pre-tokenizer (Mistral/Llama-2 tokenizer.json files of
// newer transformers) over llama2's vocabulary.
function metaspaceData(llama2) {
  const ms = JSON.parse(JSON.stringify(llama2));
  ms.tokenizerJSON.normalizer = null;
  ms.tokenizerJSON.pre_tokenizer = {
    type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "first", split: false,
  };
  ms.tokenizerConfig.legacy = true;
  return ms;
}

// ---------- long runs ----------
// Each text is one long pre-tokenized piece (or a few) for most models:
// what the merge loop costs most on. Short enough to keep the file small,
// long enough to pass the word cache (256 bytes) and the short-word path
// (128 symbols).
const longTexts = [
  "a".repeat(1500),
  " ".repeat(1500),
  "x" + " ".repeat(999) + "y",
  "7".repeat(600),
  "1234567890".repeat(40),
  "\n".repeat(400),
  "\t \n".repeat(200),
  ".".repeat(1500),
  "=".repeat(1000),
  "-".repeat(1000),
  "ab".repeat(600),
  "é".repeat(600),
  "好".repeat(400),
  "🙂".repeat(150),
  "\u3000".repeat(400),
  englishSentences.join("").replace(/[^A-Za-z]/g, ""),
];
function longFixtures(models, metaspace) {
  const out = { generator: `@lenml/tokenizers ${lenmlVersion} under node ${process.version}`, texts: longTexts, ids: {} };
  const all = Object.entries(models).map(([name, m]) => [name, m.tok]);
  all.push(["llama2_metaspace", TokenizerLoader.fromPreTrained(metaspace)]);
  for (const [name, tok] of all) {
    out.ids[name] = longTexts.map((t) => tok.encode(t, { add_special_tokens: false }));
  }
  return out;
}

// ---------- main ----------
const only = process.argv.slice(2);
if (only.length === 0 || only.includes("unicode")) {
  console.log("unicode ranges:", unicodeTables());
}
if (only.length === 0 || only.includes("tokens") || only.includes("chat") || only.includes("long")) {
  const models = {};
  for (const name of MODELS) {
    const data = loadModel(name);
    models[name] = { data, tok: TokenizerLoader.fromPreTrained(data) };
  }
  if (only.length === 0 || only.includes("long")) {
    const fx = longFixtures(models, metaspaceData(models.llama2.data));
    fs.writeFileSync(path.join(outDir, "long.json"), JSON.stringify(fx) + "\n");
    console.log("long", longTexts.length, "texts");
  }
  if (only.length === 0 || only.includes("tokens")) {
    for (const name of MODELS) {
      const fx = tokenFixtures(name, models[name].data);
      fs.writeFileSync(path.join(outDir, `${name}.json`), JSON.stringify(fx) + "\n");
      console.log(name, fx.cases.length, "cases");
    }
    // The Metaspace pre-tokenizer (Mistral/Llama-2 tokenizer.json files
    // of newer transformers) over the same vocabulary: what llama2's
    // Prepend+Replace normalizer does, done by the pre-tokenizer.
    const ms = metaspaceData(models.llama2.data);
    const fx = tokenFixtures("llama2", ms, "llama2_metaspace");
    fx.tokenizer_json_patch = { normalizer: ms.tokenizerJSON.normalizer, pre_tokenizer: ms.tokenizerJSON.pre_tokenizer };
    fs.writeFileSync(path.join(outDir, "llama2_metaspace.json"), JSON.stringify(fx) + "\n");
    console.log("llama2_metaspace", fx.cases.length, "cases");
  }
  if (only.length === 0 || only.includes("chat")) {
    const fx = chatFixtures(models);
    fs.writeFileSync(path.join(outDir, "chat.json"), JSON.stringify(fx, null, 1) + "\n");
    console.log("chat", fx.cases.length, "cases");
  }
}
// ---------- token ids of the engine-chat goldens ----------
// chat_golden.py (python3-jinja2 and the engines' message preprocessing)
// writes golden/chat_engine.json without ids; this adds each render's
// ids from the reference tokenizer (add_special_tokens false, as engines
// encode a rendered chat).
if (only.includes("engine-ids")) {
  const file = path.join(outDir, "chat_engine.json");
  const doc = JSON.parse(fs.readFileSync(file, "utf8"));
  const toks = {};
  for (const c of doc.cases) {
    if (c.rendered === undefined) continue;
    if (!toks[c.tokenizer]) toks[c.tokenizer] = TokenizerLoader.fromPreTrained(loadModel(c.tokenizer));
    c.ids = toks[c.tokenizer].encode(c.rendered, { add_special_tokens: false });
  }
  doc.ids_generator = `@lenml/tokenizers ${lenmlVersion} under node ${process.version}`;
  fs.writeFileSync(file, JSON.stringify(doc, null, 1) + "\n");
  console.log("chat_engine ids:", doc.cases.filter((c) => c.ids).length, "renders");
}

// ---------- random code points ----------
// 15,000 code points drawn uniformly (fixed seed, surrogates redrawn),
// each encoded alone by the tokenizers whose pipeline depends on Unicode
// data: qwen3 (NFC normalizer) and llama3_1 (\p{L}/\p{N} split classes).
if (only.includes("unicode-points")) {
  const rnd = mulberry32(15000);
  const points = [];
  while (points.length < 15000) {
    const cp = Math.floor(rnd() * 0x110000);
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    points.push(cp);
  }
  const out = { generator: `@lenml/tokenizers ${lenmlVersion} under node ${process.version} (Unicode ${process.versions.unicode}, ICU ${process.versions.icu})`, seed: 15000, points, ids: {} };
  for (const name of ["qwen3", "llama3_1"]) {
    const tok = TokenizerLoader.fromPreTrained(loadModel(name));
    out.ids[name] = points.map((cp) => tok.encode(String.fromCodePoint(cp), { add_special_tokens: false }));
  }
  fs.writeFileSync(path.join(outDir, "unicode_points.json"), JSON.stringify(out) + "\n");
  console.log("unicode points:", points.length);
}

// ---------- normalization data ----------
// Every code point whose normalization is not itself in the reference's
// Unicode (ICU): its NFD, its NFKD, and the NFD of it followed by U+0334
// (combining class 1), which reorders exactly when its own class is
// above 1. The Go test compares golang.org/x/text's tables with these.
if (only.includes("normalization")) {
  const rows = [];
  for (let cp = 0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const s = String.fromCodePoint(cp);
    const d = s.normalize("NFD"), kd = s.normalize("NFKD"), r = (s + "\u0334").normalize("NFD");
    if (d !== s || kd !== s || r !== s + "\u0334") rows.push([cp, d, kd, r]);
  }
  const out = { generator: `node ${process.version} String.prototype.normalize (Unicode ${process.versions.unicode}, ICU ${process.versions.icu})`, rows };
  fs.writeFileSync(path.join(outDir, "normalization.json"), JSON.stringify(out) + "\n");
  console.log("normalization rows:", rows.length);
}
