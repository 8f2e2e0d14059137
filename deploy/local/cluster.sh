#!/usr/bin/env bash
# Starts a local kvrouter cluster: 3 replicas (the first embeds NATS with
# JetStream), HAProxy in front on :8080, and 4 mock workers. Ctrl-C stops
# everything (SIGTERM too). Logs go to out/cluster/.
#
# For scripts (deploy/local/failover-tally.sh), the environment may move
# it: KVROUTER_PORT_OFFSET is added to every port (load balancer 8080,
# replicas 8081-8083, NATS 4222, gossip 7946-7948, workers 9001-9004),
# KVROUTER_CLUSTER_DIR replaces out/cluster (logs, the NATS store, and
# rN.pid with each replica's process id), KVROUTER_SKIP_BUILD=1 uses the
# binaries already in bin/.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
if ! command -v haproxy >/dev/null; then
  echo "installing haproxy (Debian package)"
  apt-get update -qq && apt-get install -y -qq haproxy >/dev/null
fi
off=${KVROUTER_PORT_OFFSET:-0}
dir=${KVROUTER_CLUSTER_DIR:-out/cluster}
mkdir -p "$dir" bin
if [ "${KVROUTER_SKIP_BUILD:-0}" != 1 ]; then
  "$GO" build -o bin/ ./cmd/kvrouter ./cmd/mockworker ./cmd/kvbench
fi
export KVROUTER_LB_PORT=${KVROUTER_LB_PORT:-$((8080 + off))}
# The replicas' addresses, which deploy/local/haproxy.cfg reads.
for i in 1 2 3; do export "KVROUTER_R$i=127.0.0.1:$((8080 + i + off))"; done
nats=$((4222 + off))
# Scale-out settings, as in deploy/k8s/router.yaml (same stride everywhere).
export KVROUTER_ROUTER_ACTIVE_SEQUENCE_STRIDE=${KVROUTER_ROUTER_ACTIVE_SEQUENCE_STRIDE:-8}
export KVROUTER_CLUSTER_BATCH_INTERVAL=${KVROUTER_CLUSTER_BATCH_INTERVAL:-5ms}
# Gossip is authenticated even on loopback, as in production: a fresh
# cluster key for this run, readable by this user only, removed on exit.
keydir=$(mktemp -d)
chmod 700 "$keydir"
head -c 32 /dev/urandom | base64 >"$keydir/cluster.key"
export KVROUTER_CLUSTER_KEY_FILE=$keydir/cluster.key
export KVROUTER_CLUSTER_LABEL=${KVROUTER_CLUSTER_LABEL:-kvrouter-local}
# HAProxy reaches every replica from 127.0.0.1 with every client's
# connections: the per-client connection cap is for clients, not for it.
export KVROUTER_CONN_LIMIT_EXEMPT=${KVROUTER_CONN_LIMIT_EXEMPT:-127.0.0.1/32}
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$keydir"; }
trap cleanup EXIT INT TERM

bin/kvrouter serve --http-addr "$KVROUTER_R1" --nats-listen 127.0.0.1:$nats --data-dir "$dir/data" \
  --replica-id r1 --cluster-bind 127.0.0.1:$((7946 + off)) >"$dir/r1.log" 2>&1 & pids+=($!)
echo $! >"$dir/r1.pid"
sleep 1
for i in 2 3; do
  addr=KVROUTER_R$i
  bin/kvrouter serve --http-addr "${!addr}" --nats-url nats://127.0.0.1:$nats --replica-id r$i \
    --cluster-bind 127.0.0.1:$((7945 + i + off)) --cluster-join 127.0.0.1:$((7946 + off)) >"$dir/r$i.log" 2>&1 & pids+=($!)
  echo $! >"$dir/r$i.pid"
done
for w in 1 2 3 4; do
  bin/mockworker --worker-id $w --http-addr 127.0.0.1:$((9000 + w + off)) --nats-url nats://127.0.0.1:$nats \
    --speedup 1 >"$dir/w$w.log" 2>&1 & pids+=($!)
done
haproxy -f deploy/local/haproxy.cfg -db >"$dir/haproxy.log" 2>&1 & pids+=($!)
echo "kvrouter cluster: load balancer http://127.0.0.1:$KVROUTER_LB_PORT, replicas :$((8081 + off))-$((8083 + off)), workers :$((9001 + off))-$((9004 + off))"
echo "gossip key (for another replica joining by hand): $KVROUTER_CLUSTER_KEY_FILE"
echo "try: curl -s localhost:$KVROUTER_LB_PORT/workers | head; Ctrl-C to stop"
wait
