package index

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// The churn fleet is an index at steady state: every rank's cache is full,
// so each engine step stores a new chain and evicts the oldest one. It is
// what a router ingests once a fleet has run for a while, as opposed to
// BenchmarkApplyStored's fill from empty. Ranks are picked at random, so
// each event's per-rank lookups start cold, as they do in a big fleet.
const (
	churnRanks        = 1000
	churnChain        = 64 // blocks per Stored (and per Removed) event
	churnChainsPerRk  = 64 // a rank's cache: 4,096 blocks, 4M entries in all
	churnSystems      = 8  // shared prefixes every rank holds
	churnSystemBlocks = 16
	churnOps          = 40_000 // events planned ahead of the timed loop
)

type churnPlan struct {
	fill []kv.Event // fills every rank's cache
	ops  []kv.Event // then alternately a Stored chain and a Removed chain
}

// planChurn builds the events with engine-style chained names (each
// block's name is unique to its content and position) and the rank's
// FIFO of chains, oldest evicted first.
func planChurn() churnPlan {
	rng := rand.New(rand.NewPCG(3, 3))
	var next uint64
	newChain := func(n int) []kv.StoredBlock {
		out := make([]kv.StoredBlock, n)
		for i := range out {
			next++
			out[i] = kv.StoredBlock{BlockHash: kv.ExternalBlockHash(mix64(next)), TokensHash: kv.LocalBlockHash(rng.Uint64())}
		}
		return out
	}
	systems := make([][]kv.StoredBlock, churnSystems)
	for s := range systems {
		systems[s] = newChain(churnSystemBlocks)
	}
	var p churnPlan
	fifo := make([][][]kv.StoredBlock, churnRanks)
	stored := func(r int, chain []kv.StoredBlock) kv.Event {
		s := systems[rng.IntN(churnSystems)]
		fifo[r] = append(fifo[r], chain)
		return kv.Event{Worker: rank(kv.WorkerID(r), 0), Kind: kv.EventStored, Blocks: chain,
			HasParent: true, ParentHash: s[len(s)-1].BlockHash}
	}
	for r := range churnRanks {
		for _, s := range systems {
			p.fill = append(p.fill, kv.Event{Worker: rank(kv.WorkerID(r), 0), Kind: kv.EventStored, Blocks: s})
		}
		for range churnChainsPerRk {
			p.fill = append(p.fill, stored(r, newChain(churnChain)))
		}
	}
	for len(p.ops) < churnOps {
		r := rng.IntN(churnRanks)
		p.ops = append(p.ops, stored(r, newChain(churnChain)))
		old := fifo[r][0]
		fifo[r] = fifo[r][1:]
		ev := kv.Event{Worker: rank(kv.WorkerID(r), 0), Kind: kv.EventRemoved}
		for _, b := range old {
			ev.Removed = append(ev.Removed, b.BlockHash)
		}
		p.ops = append(p.ops, ev)
	}
	return p
}

func (p churnPlan) filled(tb testing.TB) *Tree {
	tr := NewTree()
	for i := range p.fill {
		if err := tr.Apply(&p.fill[i]); err != nil {
			tb.Fatal(err)
		}
	}
	return tr
}

// BenchmarkApplyChurn times one event (a 64-block Stored chain or the
// 64-block Removed eviction that follows it) on a full 4M-entry index.
// Planning and filling happen before the timer starts, and again (timer
// stopped) when the planned events run out.
func BenchmarkApplyChurn(b *testing.B) {
	p := planChurn()
	tr := p.filled(b)
	i := 0
	for b.Loop() {
		if i == len(p.ops) {
			b.StopTimer()
			tr, i = p.filled(b), 0
			b.StartTimer()
		}
		if err := tr.Apply(&p.ops[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N*churnChain)/b.Elapsed().Seconds(), "blocks/s")
}

// TestChurnPlanKeepsTheIndexFull checks the benchmark's premise: after
// the planned churn, every rank holds its systems and exactly its cache.
func TestChurnPlanKeepsTheIndexFull(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 4M-entry index")
	}
	p := planChurn()
	tr := p.filled(t)
	for i := range p.ops {
		if err := tr.Apply(&p.ops[i]); err != nil {
			t.Fatal(err)
		}
	}
	want := uint64(churnRanks * (churnSystems*churnSystemBlocks + churnChainsPerRk*churnChain))
	if got := uint64(tr.Len()); got != want {
		t.Fatalf("index holds %d entries after the churn, want %d", got, want)
	}
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkDigestFullIndex times one Digest of the churn fleet's full
// index (4M entries): what every status call (/workers, gRPC Workers)
// costs the shards holding it, during which they answer no lookup.
func BenchmarkDigestFullIndex(b *testing.B) {
	tr := planChurn().filled(b)
	var d uint64
	for b.Loop() {
		d += tr.Digest()
	}
	b.ReportMetric(float64(tr.Len())*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	_ = d
}

// BenchmarkGCFullIndex times one full garbage collection with the churn
// fleet's 4M-entry index (and little else) live: what each GC cycle of a
// router spends marking its index, on the cores its lookups need. The
// events that built the index are dropped before the timer starts.
func BenchmarkGCFullIndex(b *testing.B) {
	tr := planChurn().filled(b)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for b.Loop() {
		runtime.GC()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/gc")
	b.ReportMetric(float64(ms.HeapAlloc)/float64(tr.Len()), "heap-B/entry")
	runtime.KeepAlive(tr)
}

// BenchmarkDumpFullIndex times one Dump of the churn fleet's full index
// (4M entries): what a snapshot costs the shards holding it, during which
// they answer no lookup.
func BenchmarkDumpFullIndex(b *testing.B) {
	tr := planChurn().filled(b)
	n := 0
	for b.Loop() {
		n += len(tr.Dump())
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkDumpChunksFullIndex times the chunked dump a snapshot now
// takes of the same 4M-entry index, in 4,096-entry chunks (whole ranks;
// actors' dumpChunkEntries): the whole dump per op, and the longest chunk,
// which is the longest a shard keeps a lookup waiting.
func BenchmarkDumpChunksFullIndex(b *testing.B) {
	x := New()
	x.tiers[0] = planChurn().filled(b)
	var longest time.Duration
	entries, events, chunks := 0, 0, 0
	for b.Loop() {
		var out []kv.Event
		var c DumpCursor
		for done := false; !done; chunks++ {
			start := time.Now()
			before := len(out)
			out, c, done = x.AppendDumpChunk(out, c, 4096)
			longest = max(longest, time.Since(start))
			for _, ev := range out[before:] {
				entries += len(ev.Blocks)
			}
		}
		events += len(out)
	}
	b.ReportMetric(float64(entries)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(entries)/float64(events), "entries/event")
	b.ReportMetric(float64(longest)/float64(time.Millisecond), "longest-chunk-ms")
	b.ReportMetric(float64(b.Elapsed())/float64(chunks)/float64(time.Millisecond), "mean-chunk-ms")
}
