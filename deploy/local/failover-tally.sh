#!/usr/bin/env bash
# Tally of replica deaths under load: RUNS times per mode, starts the
# shipped local cluster (deploy/local/cluster.sh: 3 replicas, HAProxy
# with deploy/local/haproxy.cfg, 4 mock workers), sends `kvbench load`
# through HAProxy (unary, then streaming), kills one replica mid-run and
# prints one line per run: the victim's requests in flight when it was
# killed, requests, failed (the client's result was an error), cut (the
# connection failed or the stream ended without [DONE]), sent again (no
# text had arrived), resumed (a stream continued from the text received:
# the client advice in docs/operations.md, "Retries"), and how long after
# the kill both survivors had dropped the dead replica's in-flight
# requests from their load view (kvrouter_gossip_origins_dropped_total).
#
# The victim alternates between r2 and r3: r1 embeds the NATS server
# (the KV event bus), and killing it stops events for every replica, a
# different failure than losing a router (docs/operations.md).
#
# Environment: RUNS (5), QPS (8), DURATION (15s of arrivals), KILL_AFTER
# (seconds into the load, 6), TERM_RUNS (1: streaming runs
# whose victim gets SIGTERM instead, a rolling update's stop), MODES
# ("unary stream"), KVROUTER_PORT_OFFSET (100: ports 8180-8183 etc., so a
# `make cluster` on the default ports can stay up). Logs: out/failover-tally/.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
RUNS=${RUNS:-5}
QPS=${QPS:-8}
DURATION=${DURATION:-15s}
KILL_AFTER=${KILL_AFTER:-6}
TERM_RUNS=${TERM_RUNS:-1}
MODES=${MODES:-unary stream}
off=${KVROUTER_PORT_OFFSET:-100}
out=out/failover-tally
rm -rf "$out"
mkdir -p "$out" bin
"$GO" build -o bin/ ./cmd/kvrouter ./cmd/mockworker ./cmd/kvbench
lb=http://127.0.0.1:$((8080 + off))
replica() { echo "http://127.0.0.1:$((8080 + $1 + off))"; }
now_ms() { date +%s%3N; }

# field NAME FILE: an integer field of kvbench's JSON result.
field() { sed -n "s/^  \"$1\": \([0-9]*\),*$/\1/p" "$2" | head -1; }

# dropped URL: the replica's count of departed peers whose load it dropped.
dropped() {
  curl -sf --max-time 1 "$1/metrics" | awk '/^kvrouter_gossip_origins_dropped_total[{ ]/ {s += $NF} END {print s + 0}'
}

cpid=
stop_cluster() {
  if [ -n "$cpid" ]; then
    kill "$cpid" 2>/dev/null || true
    wait "$cpid" 2>/dev/null || true
    cpid=
  fi
}
trap stop_cluster EXIT INT TERM

# wait_ready DIR: every replica ready, all four workers known, and one
# completion answered through the load balancer.
wait_ready() {
  local deadline=$(($(date +%s) + 60)) i n
  while :; do
    if [ "$(date +%s)" -gt "$deadline" ]; then
      echo "cluster not ready in 60 s; logs in $1" >&2
      return 1
    fi
    n=0
    for i in 1 2 3; do
      curl -sf --max-time 1 "$(replica $i)/readyz" >/dev/null && n=$((n + 1))
    done
    if [ $n = 3 ] && [ "$(curl -sf --max-time 1 "$(replica 1)/workers" | grep -o '"worker_id"' | wc -l)" -ge 4 ] &&
      curl -sf --max-time 5 -H 'Content-Type: application/json' \
        -d '{"model":"mock-model","prompt":[1,2,3],"max_tokens":1}' "$lb/v1/completions" >/dev/null; then
      sleep 1.5 # HAProxy marks a server up after two health checks 500 ms apart
      return 0
    fi
    sleep 0.3
  done
}

# run MODE N SIGNAL
run() {
  local mode=$1 n=$2 sig=$3 dir victim survivors vpid inflight t0 t1 ms i lpid flags=()
  dir=$out/$mode-$sig-$n
  mkdir -p "$dir"
  KVROUTER_PORT_OFFSET=$off KVROUTER_CLUSTER_DIR=$dir KVROUTER_SKIP_BUILD=1 \
    deploy/local/cluster.sh >"$dir/cluster.out" 2>&1 &
  cpid=$!
  wait_ready "$dir"
  victim=$((2 + n % 2))
  survivors="1 $((5 - victim))"
  [ "$mode" = unary ] && flags+=(--unary)
  bin/kvbench load --target "$lb" --qps "$QPS" --duration "$DURATION" --seed "$n" \
    --groups 10 --prompts-per-group 5 --system-tokens 1000 --question-tokens 200 --output-tokens 200 \
    "${flags[@]}" --json >"$dir/load.json" 2>"$dir/load.err" &
  lpid=$!
  sleep "$KILL_AFTER"
  vpid=$(cat "$dir/r$victim.pid")
  # The victim's requests in flight: every request reaches it from
  # HAProxy, its one client.
  inflight=$(curl -sf --max-time 1 "$(replica "$victim")/metrics" |
    awk '/^kvrouter_client_top_active_requests / {print $2}')
  t0=$(now_ms)
  kill "-$sig" "$vpid"
  ms=timeout
  while [ $(($(now_ms) - t0)) -lt 30000 ]; do
    i=0
    for s in $survivors; do
      [ "$(dropped "$(replica "$s")")" -ge 1 ] && i=$((i + 1))
    done
    if [ $i = 2 ]; then
      t1=$(now_ms)
      ms=$((t1 - t0))
      break
    fi
    sleep 0.05
  done
  wait "$lpid" || true
  stop_cluster
  printf '%-6s %-4s r%d  %9s %8s %6s %4s %10s %7s %12s\n' "$mode" "$sig" "$victim" "${inflight:-?}" \
    "$(field requests "$dir/load.json")" "$(field errors "$dir/load.json")" "$(field cut "$dir/load.json")" \
    "$(field resent "$dir/load.json")" "$(field resumed "$dir/load.json")" "$ms"
}

printf '%-6s %-4s %-3s %9s %8s %6s %4s %10s %7s %12s\n' mode sig dead "in flight" requests failed cut "sent again" resumed "dropped (ms)"
for mode in $MODES; do
  for n in $(seq 1 "$RUNS"); do
    run "$mode" "$n" KILL
  done
done
for n in $(seq 1 "$TERM_RUNS"); do
  run stream "$n" TERM
done
