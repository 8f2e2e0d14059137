package index

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// The benchmark fleet: 64 workers serving 8192-token prompts (512 blocks of
// 16 tokens). Prompts are 256 documents, each a 128-block system prompt (one
// of 8) followed by a 384-block body of its own; every worker holds 40
// documents. That is about a million (worker, block) entries over about
// 100k distinct blocks, each block shared by ~10 workers on average.
const (
	fleetWorkers      = 64
	fleetSystem       = 8
	fleetSystemBlocks = 128
	fleetDocs         = 256
	fleetDocBlocks    = 512
	fleetDocsPerRank  = 40
	fleetChunk        = 32 // blocks per Stored event, as an engine emits per step
)

type fleetDoc struct {
	local []kv.LocalBlockHash
	ext   []kv.ExternalBlockHash // engine hashes: chained, like vLLM's
}

type fleet struct {
	docs     []fleetDoc
	holdings [][]int // worker -> documents it holds
}

var buildFleetOnce = sync.OnceValue(func() *fleet {
	f := &fleet{}
	for d := range fleetDocs {
		local := make([]kv.LocalBlockHash, fleetDocBlocks)
		for i := range local {
			if i < fleetSystemBlocks {
				local[i] = kv.LocalBlockHash(mix64(uint64(d%fleetSystem)<<32 | uint64(i)))
			} else {
				local[i] = kv.LocalBlockHash(mix64(uint64(1000+d)<<32 | uint64(i)))
			}
		}
		seq := hashing.SequenceHashes(local)
		ext := make([]kv.ExternalBlockHash, len(seq))
		for i, s := range seq {
			ext[i] = kv.ExternalBlockHash(s)
		}
		f.docs = append(f.docs, fleetDoc{local: local, ext: ext})
	}
	rng := rand.New(rand.NewPCG(42, 42))
	for range fleetWorkers {
		f.holdings = append(f.holdings, rng.Perm(fleetDocs)[:fleetDocsPerRank])
	}
	return f
})

// events streams the fleet's Stored events, one chunk at a time, reusing
// one event value (callers must not keep it).
func (f *fleet) events(yield func(*kv.Event) bool) {
	var ev kv.Event
	blocks := make([]kv.StoredBlock, 0, fleetChunk)
	for w, docs := range f.holdings {
		for _, d := range docs {
			doc := f.docs[d]
			for start := 0; start < fleetDocBlocks; start += fleetChunk {
				blocks = blocks[:0]
				for i := start; i < start+fleetChunk; i++ {
					blocks = append(blocks, kv.StoredBlock{BlockHash: doc.ext[i], TokensHash: doc.local[i]})
				}
				ev = kv.Event{Worker: rank(kv.WorkerID(w), 0), Kind: kv.EventStored, Blocks: blocks}
				if start > 0 {
					ev.HasParent, ev.ParentHash = true, doc.ext[start-1]
				}
				if !yield(&ev) {
					return
				}
			}
		}
	}
}

func (f *fleet) build(tb testing.TB, apply func(*kv.Event) error) {
	for ev := range f.events {
		if err := apply(ev); err != nil {
			tb.Fatal(err)
		}
	}
}

var fleetIndexOnce = sync.OnceValue(func() *Indexer {
	x := New()
	buildFleetOnce().build(nil, x.Apply)
	return x
})

// queries returns prompts of 512 blocks: documents asked again verbatim,
// and documents whose suffix diverges at a random block (a new question
// after a shared context).
func (f *fleet) queries(n int) [][]kv.LocalBlockHash {
	rng := rand.New(rand.NewPCG(7, 7))
	out := make([][]kv.LocalBlockHash, n)
	for i := range out {
		q := slices.Clone(f.docs[rng.IntN(fleetDocs)].local)
		if i%2 == 1 {
			for j := rng.IntN(fleetDocBlocks); j < len(q); j++ {
				q[j] = kv.LocalBlockHash(rng.Uint64())
			}
		}
		out[i] = q
	}
	return out
}

// BenchmarkFindMatches times FindMatches alone. Latency percentiles come
// from a separate pass after the timed loop, so the clock reads and the
// bookkeeping they need never count towards ns/op.
func BenchmarkFindMatches(b *testing.B) {
	x := fleetIndexOnce()
	qs := buildFleetOnce().queries(1024)
	i := 0
	for b.Loop() {
		x.FindMatches(qs[i%len(qs)])
		i++
	}
	b.StopTimer()
	p50, p99, ranks := findMatchesLatency(x, qs)
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(x.Len()), "entries")
	b.ReportMetric(ranks, "ranks/query")
}

// findMatchesLatency times every query a few times, one call at a time, and
// returns the median and 99th percentile and the mean ranks matched.
func findMatchesLatency(x *Indexer, qs [][]kv.LocalBlockHash) (p50, p99 time.Duration, ranks float64) {
	const rounds = 8
	lat := make([]time.Duration, 0, rounds*len(qs))
	matched := 0
	for range rounds {
		for _, q := range qs {
			start := time.Now()
			m := x.FindMatches(q)
			lat = append(lat, time.Since(start))
			matched += len(m)
		}
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], float64(matched) / float64(len(lat))
}

func BenchmarkApplyStored(b *testing.B) {
	f := buildFleetOnce()
	var evs []kv.Event
	for ev := range f.events {
		e := *ev
		e.Blocks = slices.Clone(ev.Blocks)
		evs = append(evs, e)
	}
	tr := NewTree()
	i := 0
	for b.Loop() {
		if i == len(evs) {
			b.StopTimer()
			tr, i = NewTree(), 0
			b.StartTimer()
		}
		if err := tr.Apply(&evs[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	// Every fleet event carries fleetChunk blocks.
	b.ReportMetric(float64(b.N*fleetChunk)/b.Elapsed().Seconds(), "blocks/s")
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// measureHeap returns the live heap with the timer stopped, so the forced
// collections do not count towards the build they bracket.
func measureHeap(b *testing.B) uint64 {
	b.StopTimer()
	defer b.StartTimer()
	return heapInUse()
}

// BenchmarkMemoryPerEntry builds a tree and reports the live heap it holds
// per (worker, block) entry. "shared" is the fleet; "unique" gives every
// worker its own blocks (no sharing at all), the worst case. Its ns/op is
// the time to build the tree.
func BenchmarkMemoryPerEntry(b *testing.B) {
	f := buildFleetOnce()
	b.Run("shared", func(b *testing.B) {
		for b.Loop() {
			before := measureHeap(b)
			tr := NewTree()
			f.build(b, tr.Apply)
			after := measureHeap(b)
			b.ReportMetric(float64(after-before)/float64(tr.Len()), "B/entry")
			b.ReportMetric(float64(tr.Len()), "entries")
			b.ReportMetric(float64(tr.Nodes()), "nodes")
			runtime.KeepAlive(tr)
		}
	})
	b.Run("unique", func(b *testing.B) {
		for b.Loop() {
			before := measureHeap(b)
			tr := NewTree()
			blocks := make([]kv.StoredBlock, fleetChunk)
			var next uint64
			for w := range fleetWorkers {
				for c := 0; c < 16384/fleetChunk; c++ {
					for i := range blocks {
						next++
						blocks[i] = kv.StoredBlock{BlockHash: kv.ExternalBlockHash(next), TokensHash: kv.LocalBlockHash(mix64(next))}
					}
					ev := kv.Event{Worker: rank(kv.WorkerID(w), 0), Kind: kv.EventStored, Blocks: blocks}
					if err := tr.Apply(&ev); err != nil {
						b.Fatal(err)
					}
				}
			}
			after := measureHeap(b)
			b.ReportMetric(float64(after-before)/float64(tr.Len()), "B/entry")
			b.ReportMetric(float64(tr.Len()), "entries")
			runtime.KeepAlive(tr)
		}
	})
}

// BenchmarkApplyStoredUnique applies chains of blocks nobody holds yet, so
// every block allocates a node: the slowest Stored path. The events are
// generated before the timed loop.
func BenchmarkApplyStoredUnique(b *testing.B) {
	const events = 1 << 20 / fleetChunk
	evs := make([]kv.Event, events)
	var next uint64
	for e := range evs {
		blocks := make([]kv.StoredBlock, fleetChunk)
		for i := range blocks {
			next++
			blocks[i] = kv.StoredBlock{BlockHash: kv.ExternalBlockHash(next), TokensHash: kv.LocalBlockHash(mix64(next))}
		}
		evs[e] = kv.Event{Worker: rank(kv.WorkerID(next%fleetWorkers), 0), Kind: kv.EventStored, Blocks: blocks}
	}
	tr := NewTree()
	i := 0
	for b.Loop() {
		if i == len(evs) {
			b.StopTimer()
			tr, i = NewTree(), 0
			b.StartTimer()
		}
		if err := tr.Apply(&evs[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N*fleetChunk)/b.Elapsed().Seconds(), "blocks/s")
}
