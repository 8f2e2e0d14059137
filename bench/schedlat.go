package bench

import (
	"runtime/metrics"
	"time"
)

// schedLatencyMetric is the Go runtime's histogram of how long goroutines
// waited runnable before running: on a saturated machine, every hop a
// lookup takes (caller → scheduler → shard → scheduler → caller) waits
// here for a processor, whatever the mailboxes do.
const schedLatencyMetric = "/sched/latencies:seconds"

// schedLatency snapshots the runtime's scheduling-latency histogram.
func schedLatency() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencyMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// histogramPercentile is the p-th percentile (0 < p <= 100) of the
// samples added between before and after (same buckets), as the upper
// bound of the bucket it falls in; 0 when nothing was added.
func histogramPercentile(before, after *metrics.Float64Histogram, p float64) time.Duration {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return 0
	}
	var total uint64
	for i := range after.Counts {
		total += after.Counts[i] - before.Counts[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(p / 100 * float64(total))
	rank = max(rank, 1)
	var seen uint64
	for i := range after.Counts {
		seen += after.Counts[i] - before.Counts[i]
		if seen >= rank {
			upper := after.Buckets[i+1]
			if upper > 1e9 { // the last bucket is open (+Inf)
				upper = after.Buckets[i]
			}
			return time.Duration(upper * float64(time.Second))
		}
	}
	return 0
}

// gcSample is the process's GC work so far (Go runtime metrics).
type gcSample struct {
	cycles       uint64
	gcCPU, total float64 // CPU seconds: the GC's (mark assists, workers, pauses), everything's
	allocated    uint64  // heap bytes allocated since the process started
	live, goal   uint64  // heap marked live by the last cycle, and the next cycle's target
}

func readGC() gcSample {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	var g gcSample
	u := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	f := func(i int) float64 {
		if s[i].Value.Kind() == metrics.KindFloat64 {
			return s[i].Value.Float64()
		}
		return 0
	}
	g.cycles, g.gcCPU, g.total = u(0), f(1), f(2)
	g.allocated, g.live, g.goal = u(3), u(4), u(5)
	return g
}

// gcInterval estimates the seconds between GC cycles at the allocation
// rate seen from a to b: a cycle starts when the heap reaches the goal,
// and between cycles it grows by what is allocated (0 when nothing was).
func gcInterval(a, b gcSample, elapsed time.Duration) (allocPerSec, every float64) {
	if elapsed <= 0 || b.allocated <= a.allocated {
		return 0, 0
	}
	allocPerSec = float64(b.allocated-a.allocated) / elapsed.Seconds()
	if b.goal > b.live {
		every = float64(b.goal-b.live) / allocPerSec
	}
	return allocPerSec, every
}

// gcBetween is how many GC cycles ran from a to b and the GC's share of
// the CPU time available to the process over that span (the runtime's
// own accounting, which counts GOMAXPROCS × wall time as the total).
func gcBetween(a, b gcSample) (cycles int, share float64) {
	if d := b.total - a.total; d > 0 {
		share = (b.gcCPU - a.gcCPU) / d
	}
	return int(b.cycles - a.cycles), share
}
