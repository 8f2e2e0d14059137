#!/usr/bin/env bash
# The cost comparison (`make cost-table`): four workloads, two seeds each,
# the router's default cost (kvrouter: ttft), Dynamo's cost (kvrouter_dynamo)
# and approximate mode (with Dynamo's cost) against round-robin, every
# point measured REPEATS times (the policy order rotated between runs),
# then one table of medians and [min-max] ranges. Each workload runs at
# the one load where the policies part ways on this machine:
#   demo       the demo's shared-prefix workload at 40 QPS
#   multiturn  30 conversations x 5 turns, 6,000-token system prompts, 32 QPS
#   mooncake   180 lines of the shipped Mooncake trace (the seed picks the
#              window) rescaled to 12 QPS
#   b2b        llm-d's B2B shape (kvbench b2b) at 30 QPS
# Results: out/cost-table/<workload>-seed<N>/report.json and table.txt.
# SMOKE=1 runs a tiny version (one seed, one run, a few requests) to check
# that everything starts; its figures mean nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
OUT=${OUT:-out/cost-table}
SEEDS=${SEEDS:-1 2}
REPEATS=${REPEATS:-3}
POLICIES=kvrouter,kvrouter_dynamo,kvrouter_approx,round_robin,oracle
# requests and warm-up per workload: demo, multi-turn, mooncake, b2b
DEMO="--requests 300 --warmup 100"
MT="--requests 300 --warmup 75"
MC="--requests 180 --warmup 45"
B2B="--requests 300 --warmup 100"
if [ "${SMOKE:-0}" = 1 ]; then
  SEEDS=1 REPEATS=1
  DEMO="--requests 24 --warmup 8" MT="--requests 24 --warmup 8" MC="--requests 24 --warmup 8" B2B="--requests 24 --warmup 8"
fi
mkdir -p "$OUT"
"$GO" build -o "$OUT/kvbench" ./cmd/kvbench
kb() { echo "== $(date +%T) kvbench $*" >&2; "$OUT/kvbench" "$@" --repeats "$REPEATS" --policies "$POLICIES" > "$OUT/$name.txt"; }
start=$(date +%s)
for seed in $SEEDS; do
  name=demo-seed$seed
  kb demo --qps 40 $DEMO --seed "$seed" --out "$OUT/$name"
  name=multiturn-seed$seed
  kb run --preset h100-llama3-8b --workload multi-turn --conversations 30 --turns 5 --system-tokens 6000 \
    --user-tokens 200 --output-tokens 100 --qps 32 $MT --seed "$seed" --out "$OUT/$name"
  name=mooncake-seed$seed
  kb run --preset h100-llama3-8b --workload mooncake --qps 12 $MC --seed "$seed" --out "$OUT/$name"
  name=b2b-seed$seed
  kb b2b --qps 30 $B2B --seed "$seed" --out "$OUT/$name"
done
reports=()
for seed in $SEEDS; do
  for w in demo multiturn mooncake b2b; do reports+=("$OUT/$w-seed$seed/report.json"); done
done
"$OUT/kvbench" table "${reports[@]}" | tee "$OUT/table.txt"
echo "took $(( $(date +%s) - start )) s; per-workload output in $OUT/*.txt, this table in $OUT/table.txt"
