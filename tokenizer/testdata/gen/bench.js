// Throughput of the reference tokenizer (@lenml/tokenizers under node) on
// the inputs of BenchmarkTokenize, for the ratio in the closing numbers:
//   make tokenizer-bench-node
// Prints MB/s per model and text, warm (the reference's word cache kept
// across runs, like BenchmarkTokenize's default) after a warm-up.
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");

const here = __dirname;
const cache = process.env.KVROUTER_NPM_CACHE || path.join(here, "../../../.cache/npm");
const seconds = Number(process.env.BENCH_SECONDS || 3);
for (const model of ["qwen3", "llama3_1"]) {
  const d = path.join(cache, "tokenizers", model);
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(d, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(d, "tokenizer_config.json"), "utf8")),
  });
  for (const name of ["en", "zh"]) {
    const text = fs.readFileSync(path.join(here, "..", "golden", `bench_${name}.txt`), "utf8");
    const bytes = Buffer.byteLength(text);
    let n = 0;
    for (let i = 0; i < 3; i++) n = tok.encode(text, { add_special_tokens: false }).length;
    let runs = 0;
    const t0 = process.hrtime.bigint();
    let el = 0;
    while (el < seconds) {
      tok.encode(text, { add_special_tokens: false });
      runs++;
      el = Number(process.hrtime.bigint() - t0) / 1e9;
    }
    console.log(`${model}/${name}\t${((bytes * runs) / el / 1e6).toFixed(2)} MB/s\t${((el / runs) * 1e6).toFixed(0)} us/op\t${n} tokens`);
  }
}
