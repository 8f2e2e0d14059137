#!/usr/bin/env bash
# Starts a local kvrouter cluster: 3 replicas (the first embeds NATS with
# JetStream), HAProxy in front on :8080, and 4 mock workers. Ctrl-C stops
# everything. Logs go to out/cluster/.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
if ! command -v haproxy >/dev/null; then
  echo "installing haproxy (Debian package)"
  apt-get update -qq && apt-get install -y -qq haproxy >/dev/null
fi
mkdir -p out/cluster bin
"$GO" build -o bin/ ./cmd/kvrouter ./cmd/mockworker ./cmd/kvbench
export KVROUTER_LB_PORT=${KVROUTER_LB_PORT:-8080}
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

bin/kvrouter serve --http-addr 127.0.0.1:8081 --nats-listen 127.0.0.1:4222 --data-dir out/cluster/data \
  --replica-id r1 --cluster-bind 127.0.0.1:7946 >out/cluster/r1.log 2>&1 & pids+=($!)
sleep 1
for i in 2 3; do
  bin/kvrouter serve --http-addr 127.0.0.1:808$i --nats-url nats://127.0.0.1:4222 --replica-id r$i \
    --cluster-bind 127.0.0.1:794$((5+i)) --cluster-join 127.0.0.1:7946 >out/cluster/r$i.log 2>&1 & pids+=($!)
done
for w in 1 2 3 4; do
  bin/mockworker --worker-id $w --http-addr 127.0.0.1:900$w --nats-url nats://127.0.0.1:4222 \
    --speedup 1 >out/cluster/w$w.log 2>&1 & pids+=($!)
done
haproxy -f deploy/local/haproxy.cfg -db >out/cluster/haproxy.log 2>&1 & pids+=($!)
echo "kvrouter cluster: load balancer http://127.0.0.1:$KVROUTER_LB_PORT, replicas :8081-8083, workers :9001-9004"
echo "gossip key (for another replica joining by hand): $KVROUTER_CLUSTER_KEY_FILE"
echo "try: curl -s localhost:$KVROUTER_LB_PORT/workers | head; Ctrl-C to stop"
wait
