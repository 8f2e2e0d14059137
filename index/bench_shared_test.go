package index

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// The shared-prefix fleet reproduces the shape of the Mooncake conversation
// trace: every request starts with the same block, so that block is held by
// every worker, and below it each worker holds chains of its own (a
// conversation each). Every fleet indexes the same sharedChainCount chains
// of sharedChainBlocks blocks, dealt out evenly: 8 a worker at 7,000
// workers (about 7.4 in the trace at 1,000), 875 at 64. Only how many
// workers share the first block varies, not the size or the shape of the
// tree, so a benchmark comparing fleets measures the cost of the sharing
// rather than a bigger heap missing the CPU caches more.
const (
	sharedChainCount  = 7000 * 8
	sharedChainBlocks = 16
	sharedExt         = kv.ExternalBlockHash(1) // the engines' name for the shared block
	sharedLocal       = kv.LocalBlockHash(1)
)

var sharedWorkerCounts = []int{64, 1000, 7000}

// sharedPrefixEvents returns the Stored events of a fleet of workers that
// each hold the shared block and chains chains of chainBlocks blocks below
// it. Chains are dealt round-robin, as interleaved engines would publish
// them, so one worker's blocks are not laid out together in memory.
func sharedPrefixEvents(workers, chains, chainBlocks int) []kv.Event {
	out := make([]kv.Event, 0, workers*(1+chains))
	for w := range workers {
		out = append(out, kv.Event{Worker: rank(kv.WorkerID(w), 0), Kind: kv.EventStored,
			Blocks: []kv.StoredBlock{{BlockHash: sharedExt, TokensHash: sharedLocal}}})
	}
	for c := range chains {
		for w := range workers {
			blocks := make([]kv.StoredBlock, chainBlocks)
			for i := range blocks {
				ext := uint64(w+1)<<32 | uint64(c)<<16 | uint64(i)
				blocks[i] = kv.StoredBlock{BlockHash: kv.ExternalBlockHash(ext), TokensHash: kv.LocalBlockHash(mix64(ext))}
			}
			out = append(out, kv.Event{Worker: rank(kv.WorkerID(w), 0), Kind: kv.EventStored,
				HasParent: true, ParentHash: sharedExt, Blocks: blocks})
		}
	}
	return out
}

// sharedFleet returns the events of the benchmark fleet of workers, and how
// many entries each worker holds.
func sharedFleet(workers int) ([]kv.Event, int) {
	chains := sharedChainCount / workers
	return sharedPrefixEvents(workers, chains, sharedChainBlocks), 1 + chains*sharedChainBlocks
}

// buildShared applies evs to a new tree, then collects the garbage of the
// tree it replaces so that the collector does not run during the timed
// removals that follow.
func buildShared(b *testing.B, evs []kv.Event) *Tree {
	tr := NewTree()
	for i := range evs {
		if err := tr.Apply(&evs[i]); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	return tr
}

// BenchmarkRemoveSharedPrefix removes one worker per iteration from the
// shared-prefix fleet, in three ways: a Removed event for the shared block
// (which cascades to the worker's chains), a Cleared event, and
// RemoveWorker. Each drops every entry of the worker, so entries/s should
// not depend on how many other workers share the block. Building the tree,
// and rebuilding it once every worker is gone, is outside the timed region.
func BenchmarkRemoveSharedPrefix(b *testing.B) {
	ops := []struct {
		name string
		do   func(tr *Tree, w kv.WorkerID, ev *kv.Event) error
	}{
		{"removed", func(tr *Tree, _ kv.WorkerID, ev *kv.Event) error { return tr.Apply(ev) }},
		{"cleared", func(tr *Tree, _ kv.WorkerID, ev *kv.Event) error { return tr.Apply(ev) }},
		{"removeworker", func(tr *Tree, w kv.WorkerID, _ *kv.Event) error { tr.RemoveWorker(w); return nil }},
	}
	for _, op := range ops {
		for _, workers := range sharedWorkerCounts {
			b.Run(fmt.Sprintf("%s/workers=%d", op.name, workers), func(b *testing.B) {
				stored, perWorker := sharedFleet(workers)
				evs := make([]kv.Event, workers)
				for w := range evs {
					evs[w] = kv.Event{Worker: rank(kv.WorkerID(w), 0), Kind: kv.EventRemoved, Removed: []kv.ExternalBlockHash{sharedExt}}
					if op.name == "cleared" {
						evs[w] = kv.Event{Worker: rank(kv.WorkerID(w), 0), Kind: kv.EventCleared}
					}
				}
				tr := buildShared(b, stored)
				w := 0
				for b.Loop() {
					if w == workers {
						b.StopTimer()
						if tr.Len() != 0 {
							b.Fatalf("%d entries left after removing every worker", tr.Len())
						}
						tr, w = buildShared(b, stored), 0
						b.StartTimer()
					}
					if err := op.do(tr, kv.WorkerID(w), &evs[w]); err != nil {
						b.Fatal(err)
					}
					w++
				}
				b.ReportMetric(float64(b.N*perWorker)/b.Elapsed().Seconds(), "entries/s")
			})
		}
	}
}

// BenchmarkStoreSharedPrefix applies the shared-prefix fleet's Stored
// events: ingest below a block with thousands of children.
func BenchmarkStoreSharedPrefix(b *testing.B) {
	for _, workers := range sharedWorkerCounts {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			evs, _ := sharedFleet(workers)
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
			b.ReportMetric(float64(appliedBlocks(evs, b.N))/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}

// appliedBlocks counts the blocks of n events applied from evs in a cycle.
func appliedBlocks(evs []kv.Event, n int) int {
	total, part := 0, 0
	for i := range evs {
		if i == n%len(evs) {
			part = total
		}
		total += len(evs[i].Blocks)
	}
	return n/len(evs)*total + part
}
