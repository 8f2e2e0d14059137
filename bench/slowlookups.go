package bench

import (
	"runtime/debug"
	"time"
)

// DynamoLookupP99 is the lookup p99 Dynamo publishes for its
// branch-sharded indexer (at 30k+ events/s): a paced step counts its
// lookups slower than this.
const DynamoLookupP99 = 3200 * time.Microsecond

// GCNeighbourhood is how close to a GC cycle's last pause a slow lookup
// must come to count as near it: a cycle's concurrent mark runs for tens
// of milliseconds before that pause on a multi-gigabyte heap, and its
// sweep and the backlog it left run on after it.
const GCNeighbourhood = 250 * time.Millisecond

// slowLookups counts the lookups scheduled from warmup on that took
// longer than limit, and how many of those came within near of one of
// gcAt: a lookup spans its scheduled time to its answer, and is near a
// cycle whose pause ended in that span widened by near on both sides.
// It answers whether a step's tail is the collector or the shards.
func slowLookups(rs []lookupResult, start time.Time, warmup, limit, near time.Duration, gcAt []time.Time) (slow, nearGC int) {
	for _, r := range rs {
		if r.at < warmup || r.latency <= limit {
			continue
		}
		slow++
		from := start.Add(r.at)
		to := from.Add(r.latency)
		for _, g := range gcAt {
			if !g.Before(from.Add(-near)) && !g.After(to.Add(near)) {
				nearGC++
				break
			}
		}
	}
	return slow, nearGC
}

// gcPausesSince returns when the GC cycles that ended after t ended (the
// end of each cycle's last stop-the-world pause), oldest first, from the
// runtime's record of the most recent cycles.
func gcPausesSince(t time.Time) []time.Time {
	var s debug.GCStats
	debug.ReadGCStats(&s)
	var out []time.Time
	for i := len(s.PauseEnd) - 1; i >= 0; i-- { // PauseEnd is newest first
		if s.PauseEnd[i].After(t) {
			out = append(out, s.PauseEnd[i])
		}
	}
	return out
}
