#!/usr/bin/env python3
"""CPU time per benchmark op, robust to a shared machine's load.

Runs a compiled test binary's benchmarks at two iteration counts and takes
(cpu(N2) - cpu(N1)) / (N2 - N1) from the process's user+system time
(rusage), so the fixture's setup cancels out and time spent waiting for a
core does not count. Interleaves the benchmarks `rounds` times and prints
medians, so drift hits every benchmark alike.

    go test -c -o /tmp/actors.test ./actors/
    python3 bench/cpuperop.py /tmp/actors.test 3 \
        BenchmarkDecisionBound:2000:12000 BenchmarkScheduleActor:1000:4000 \
        BenchmarkScheduleActorStride8:1000:4000 BenchmarkScheduleActorQueryOnly:1000:4000
"""
import resource, subprocess, sys, statistics
if len(sys.argv) < 4:
    sys.exit('usage: cpuperop.py TEST_BINARY ROUNDS BenchmarkName:N1:N2 ...')
binary, rounds, spec = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def cpu(bench, n):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([binary, '-test.run', '^$', '-test.bench', '^'+bench+'$', '-test.benchtime', f'{n}x'], check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
res = {}
for r in range(rounds):
    for s in spec:
        bench, n1, n2 = s.split(':'); n1, n2 = int(n1), int(n2)
        per = (cpu(bench, n2) - cpu(bench, n1)) / (n2 - n1)
        if per <= 0:
            # The shorter run cost more than the longer one (its setup or a
            # GC cycle swung): the difference says nothing, so the round
            # is dropped rather than averaged in.
            print(f'round {r} {bench}: invalid ({per*1e6:.1f} us CPU/op), dropped', flush=True)
            continue
        res.setdefault(bench, []).append(per)
        print(f'round {r} {bench}: {per*1e6:.1f} us CPU/op', flush=True)
for b, v in res.items():
    print(f'{b}: median {statistics.median(v)*1e6:.1f} us CPU/op over {len(v)} valid rounds (min {min(v)*1e6:.1f}, max {max(v)*1e6:.1f})')
