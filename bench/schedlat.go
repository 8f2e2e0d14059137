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
