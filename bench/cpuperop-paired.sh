#!/bin/bash
# CPU per benchmark op of two test binaries measured at the same time:
# each runs bench/cpuperop.py with GOMAXPROCS=1, pinned to its own core
# (taskset), the cores swapped every round, so a drift of the host's speed
# hits both alike. Prints each round's lines, then the per-round paired
# ratios (after ÷ before) with their median and range.
#
#   go test -c -o /tmp/before.test ./actors/   # at the older commit
#   go test -c -o /tmp/after.test ./actors/
#   bench/cpuperop-paired.sh /tmp/before.test /tmp/after.test 20
set -euo pipefail
before=$1 after=$2 rounds=${3:-6}
specs=${SPECS:-"BenchmarkDecisionBound:5000:50000 BenchmarkScheduleActor:3000:30000 BenchmarkScheduleActorQueryOnly:3000:60000 BenchmarkScheduleActorSticky:3000:30000"}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
	if [ $((r % 2)) = 1 ]; then cb=0 ca=1; else cb=1 ca=0; fi
	# shellcheck disable=SC2086
	GOMAXPROCS=1 taskset -c $cb python3 "$here/cpuperop.py" "$before" 1 $specs 2>&1 | grep -v '^round' | sed "s/^/before r$r /" >"$out/b$r" &
	# shellcheck disable=SC2086
	GOMAXPROCS=1 taskset -c $ca python3 "$here/cpuperop.py" "$after" 1 $specs 2>&1 | grep -v '^round' | sed "s/^/after r$r /" >"$out/a$r" &
	wait
	cat "$out/b$r" "$out/a$r" | tee -a "$out/all"
done
python3 - "$out/all" <<'PY'
import re, statistics, collections, sys
d = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    m = re.match(r'(\w+) r(\d+) (\w+): median ([\d.]+)', line)
    if m:
        d[m.group(3)][(m.group(1), int(m.group(2)))] = float(m.group(4))
for bench, v in sorted(d.items()):
    rounds = sorted({k[1] for k in v if ('before', k[1]) in v and ('after', k[1]) in v})
    ratios = [v[('after', r)] / v[('before', r)] for r in rounds]
    if ratios:
        print(f"{bench}: after/before paired median {statistics.median(ratios):.3f} "
              f"[{min(ratios):.2f}-{max(ratios):.2f}] over {len(ratios)} rounds")
PY
