package bench

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/kv"
)

// BenchmarkApplyMooncakeSteady times what a router's shards do per KV
// event at steady state, with nothing else in the timed loop: the
// Mooncake trace's events on 1,000 workers with 16,384-block caches
// (kvbench indexer's defaults), applied to four indexes split by worker
// as the shards split them, after an untimed fill to 95% (15.6 M
// entries). Unlike index's BenchmarkApplyChurn, its shared prefixes are
// the trace's: some are held by most of the fleet. kvbench indexer
// --steady measures the same events through the actors, paced, with
// lookups.
func BenchmarkApplyMooncakeSteady(b *testing.B) {
	if testing.Short() {
		b.Skip("plans and fills a 15.6 M-entry index")
	}
	recs, err := LoadTrace("", 0)
	if err != nil {
		b.Fatal(err)
	}
	cfg := IndexerRateConfig{
		Plan:   IndexerPlanConfig{Workers: 1000, BlockSize: 64, CapacityBlocks: 16384},
		Paces:  []EventPace{{Rate: 30000}},
		Step:   10 * time.Second,
		Steady: true,
	}
	store, evs, fill, err := planLooped(recs, cfg)
	if err != nil {
		b.Fatal(err)
	}
	const shards = 4
	var idx [shards]*index.Indexer
	refill := func() {
		for s := range idx {
			idx[s] = index.New()
		}
		var scratch kv.Event
		for _, e := range evs[:fill] {
			applyTo(b, idx[:], store.load(e.ev, &scratch))
		}
	}
	refill()
	b.ResetTimer()
	i, blocks := fill, 0
	var scratch kv.Event
	for b.Loop() {
		if i == len(evs) {
			b.StopTimer()
			refill()
			i = fill
			b.StartTimer()
		}
		ev := store.load(evs[i].ev, &scratch)
		blocks += len(ev.Blocks) + len(ev.Removed)
		applyTo(b, idx[:], ev)
		i++
	}
	b.ReportMetric(float64(blocks)/float64(b.N), "blocks/event")
}

func applyTo(b *testing.B, idx []*index.Indexer, ev *kv.Event) {
	if err := idx[int(ev.Worker.WorkerID)%len(idx)].Apply(ev); err != nil {
		b.Fatal(err)
	}
}
