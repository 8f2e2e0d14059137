package index

import (
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// fleetWithStoreOnce is the benchmark fleet plus a shared store (worker
// fleetWorkers) holding every document in the shared tier.
var fleetWithStoreOnce = sync.OnceValue(func() *Indexer {
	x := New()
	f := buildFleetOnce()
	f.build(nil, x.Apply)
	store := rank(kv.WorkerID(fleetWorkers), 0)
	for _, doc := range f.docs {
		ev := kv.Event{Worker: store, Tier: kv.TierShared, Kind: kv.EventStored}
		for i := range doc.local {
			ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: doc.ext[i], TokensHash: doc.local[i]})
		}
		if err := x.Apply(&ev); err != nil {
			panic(err)
		}
	}
	return x
})

// BenchmarkSharedPrefix is what the shared tier adds to a shard's score:
// the shared-prefix walk beside FindMatches on the same index and
// prompts (compare the two sub-benchmarks' ns/op from one run).
func BenchmarkSharedPrefix(b *testing.B) {
	x := fleetWithStoreOnce()
	qs := buildFleetOnce().queries(1024)
	b.Run("find_matches", func(b *testing.B) {
		i := 0
		for b.Loop() {
			x.FindMatches(qs[i%len(qs)])
			i++
		}
	})
	b.Run("shared_prefix", func(b *testing.B) {
		i, blocks := 0, 0
		for b.Loop() {
			blocks += int(x.SharedPrefix(qs[i%len(qs)]))
			i++
		}
		b.ReportMetric(float64(blocks)/float64(i), "shared-blocks/query")
	})
}
