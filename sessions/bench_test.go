package sessions

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkRecordKept is a live session's next request (the common case).
func BenchmarkRecordKept(b *testing.B) {
	tb := newTable(b, "a", DefaultMaxSessions)
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = "session-" + strconv.Itoa(i)
		tb.Record(ids[i], rank(uint64(i%64), 0), t0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tb.Record(ids[i%len(ids)], rank(uint64(i%len(ids)%64), 0), t0.Add(time.Duration(i)))
	}
}

// BenchmarkRecordEvicting binds fresh ids into a full table (a flood of
// new session ids): every bind evicts the least recently used.
func BenchmarkRecordEvicting(b *testing.B) {
	tb := newTable(b, "a", DefaultMaxSessions)
	for i := range DefaultMaxSessions {
		tb.Record("fill-"+strconv.Itoa(i), rank(uint64(i%64), 0), t0)
	}
	// More ids than the table holds: by the time one comes round again it
	// was evicted, so every iteration binds and evicts.
	ids := make([]string, 1<<18)
	for i := range ids {
		ids[i] = "new-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tb.Record(ids[i%len(ids)], rank(uint64(i%64), 0), t0.Add(time.Duration(i+1)))
	}
}

// BenchmarkApply merges a peer's writes (gossip or a snapshot).
func BenchmarkApply(b *testing.B) {
	src := newTable(b, "b", DefaultMaxSessions)
	entries := make([]Entry, 10_000)
	for i := range entries {
		entries[i], _ = src.Record("session-"+strconv.Itoa(i), rank(uint64(i%64), 0), t0.Add(time.Duration(i)))
	}
	tb := newTable(b, "a", DefaultMaxSessions)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		e := entries[i%len(entries)]
		e.LastUsed += int64(i) // each a newer use (not after now: that would count as now)
		tb.Apply(e, t0.Add(time.Duration(i+len(entries))))
	}
}

// BenchmarkLookup is the scheduler's read at the start of a decision.
func BenchmarkLookup(b *testing.B) {
	tb := newTable(b, "a", DefaultMaxSessions)
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = "session-" + strconv.Itoa(i)
		tb.Record(ids[i], rank(uint64(i%64), 0), t0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tb.Lookup(ids[i%len(ids)], t0)
	}
}
