#!/bin/sh
# Creates the three uncommitted files kustomization.yaml turns into
# Secrets, each only if it is missing (re-running never rotates a key):
#   cluster.key    the replicas' gossip key (32 random bytes, base64)
#   admin.token    the admin API's bearer token (32 random bytes, base64)
#   nats-auth.env  the NATS passwords of the "router" and "worker" users
#                  (hex: no escaping needed in a nats:// URL)
# Usage: deploy/k8s/gen-secrets.sh [DIR]   (DIR defaults to this script's)
set -eu
dir=${1:-$(dirname "$0")}
umask 077
rand_b64() { head -c 32 /dev/urandom | base64 | tr -d '\n'; echo; }
rand_hex() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
if [ ! -s "$dir/cluster.key" ]; then
	rand_b64 > "$dir/cluster.key"
	echo "created $dir/cluster.key"
fi
if [ ! -s "$dir/admin.token" ]; then
	rand_b64 > "$dir/admin.token"
	echo "created $dir/admin.token"
fi
if [ ! -s "$dir/nats-auth.env" ]; then
	printf 'router-password=%s\nworker-password=%s\n' "$(rand_hex)" "$(rand_hex)" > "$dir/nats-auth.env"
	echo "created $dir/nats-auth.env"
fi
