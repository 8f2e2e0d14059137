#!/bin/bash
# CPU per routing decision of an older revision (OLD) and the working tree
# (NEW), measured in one process (bench/samebinary): the older revision's
# packages are copied under another module path, so both routers run side
# by side in alternating blocks and share every drift of the machine.
#
#   bench/cpuperop-samebinary.sh 60e28f8 -duration 120s -modes route,query
#
# Flags after the revision go to the harness (-block, -duration, -stride,
# -modes). GOMAXPROCS defaults to 1 (no idle processor spinning into the
# CPU count); set it to run otherwise. KEEP_BINARY=path keeps the
# harness binary (for pprof with -cpuprofile).
set -euo pipefail
old=${1:?usage: cpuperop-samebinary.sh OLD_REVISION [harness flags]}
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
oldmod=kvold.local/kvrouter

mkdir -p "$work/old" "$work/h"
git -C "$repo" archive "$old" | tar -x -C "$work/old"
sed -i "s|^module .*|module $oldmod|" "$work/old/go.mod"
grep -rl --include='*.go' 'github.com/kvrouter/kvrouter' "$work/old" |
	xargs sed -i "s|\"github.com/kvrouter/kvrouter/|\"$oldmod/|g"

cp "$repo/bench/samebinary/main.go" "$work/h/"
cp "$repo/bench/samebinary/side.go" "$work/h/side_new.go"
sed -e "s|\"github.com/kvrouter/kvrouter/|\"$oldmod/|g" -e 's/newSideNEW/newSideOLD/g' \
	"$repo/bench/samebinary/side.go" >"$work/h/side_old.go"
goversion=$(sed -n 's/^go //p' "$repo/go.mod")
cat >"$work/h/go.mod" <<MOD
module samebinary

go $goversion

require (
	github.com/kvrouter/kvrouter v0.0.0
	$oldmod v0.0.0
)

replace github.com/kvrouter/kvrouter => $repo

replace $oldmod => $work/old
MOD
cat "$repo/go.sum" "$work/old/go.sum" | sort -u >"$work/h/go.sum"
(cd "$work/h" && go mod tidy >/dev/null 2>&1 || true)
(cd "$work/h" && go build -tags samebinary -o "$work/samebinary" .)
[ -n "${KEEP_BINARY:-}" ] && cp "$work/samebinary" "$KEEP_BINARY"
# Both revisions register the same protobuf messages; the registry only
# warns about that.
GOLANG_PROTOBUF_REGISTRATION_CONFLICT=warn GOMAXPROCS=${GOMAXPROCS:-1} "$work/samebinary" "$@" 2> >(grep -v 'proto\|registration conflict\|protobuf.dev\|previously from\|currently from\|^\s*$' >&2)
