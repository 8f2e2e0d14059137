// A real OpenAI client (the official `openai` npm package) talking to the
// router's proxy: two conversations of two turns each, one turn streamed
// and one not, and the router's view (POST /route without state) of each
// second turn before it is sent. Prints one JSON summary on stdout.
//
// Usage: node openai_chat.js BASE_URL MODEL
"use strict";
const mod = require("openai");
const OpenAI = mod.OpenAI || mod.default || mod;

const [base, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0, timeout: 30000 });

const system =
  "You are a careful assistant for an inference platform team. Answer briefly, cite numbers when you have them, " +
  "and say so when you do not know. The team runs many engines behind a KV-cache-aware router.";

async function routerView(messages) {
  // The router's decision for the next turn, without recording it:
  // worker, cached tokens and prompt length.
  for (let i = 0; i < 100; i++) {
    const r = await fetch(base + "/route", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model, messages, update_states: false }),
    });
    const v = await r.json();
    if (r.status !== 200) throw new Error("route: " + r.status + " " + JSON.stringify(v));
    if (v.cached_tokens > 0) return v;
    await new Promise((res) => setTimeout(res, 50)); // KV events still on their way
  }
  throw new Error("the router never saw the first turn's blocks");
}

async function turn(messages, stream) {
  if (!stream) {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 6 });
    return { worker: r.model, content: r.choices[0].message.content, usage: r.usage };
  }
  const s = await client.chat.completions.create({
    model, messages, max_tokens: 6, stream: true, stream_options: { include_usage: true },
  });
  let content = "";
  let worker = "";
  let usage = null;
  let chunks = 0;
  for await (const chunk of s) {
    chunks++;
    worker = chunk.model || worker;
    if (chunk.choices.length > 0 && chunk.choices[0].delta.content) content += chunk.choices[0].delta.content;
    if (chunk.usage) usage = chunk.usage;
  }
  return { worker, content, usage, chunks };
}

// A streamed turn without stream_options: the proxy asks the engine for
// usage anyway (live cache parity) and must keep it from this client.
async function plainStream() {
  const s = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "One word, please." }], max_tokens: 6, stream: true,
  });
  let content = "";
  let usage = null;
  let chunks = 0;
  for await (const chunk of s) {
    chunks++;
    if (chunk.choices.length > 0 && chunk.choices[0].delta.content) content += chunk.choices[0].delta.content;
    if (chunk.usage) usage = chunk.usage;
  }
  return { content, usage, chunks };
}

async function conversation(question, followUp, firstStreamed) {
  const m1 = [{ role: "system", content: system }, { role: "user", content: question }];
  const t1 = await turn(m1, firstStreamed);
  const m2 = m1.concat([{ role: "assistant", content: t1.content }, { role: "user", content: followUp }]);
  const view = await routerView(m2);
  const t2 = await turn(m2, !firstStreamed);
  return { first: t1, view, second: t2 };
}

(async () => {
  const out = {
    a: await conversation("What does prefix caching save on a multi-turn chat?", "And what breaks it?", false),
    b: await conversation("Why do router and engine need the same tokenizer?", "Give an example with one token.", true),
  };
  const plain = await plainStream();
  console.log(JSON.stringify(plain));
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
