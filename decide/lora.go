package decide

import (
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/scheduling"
)

// LoraAffinity prices loading an adapter: a candidate rank that this
// Decider routed a request of the request's LoRA adapter to within
// LoraWarmFor costs 0, any other costs 1, so the scorer's weight is what
// loading the adapter is worth in the pipeline's cost units (blocks for
// Dynamo's cost, seconds for the ttft cost). Requests without an adapter
// cost 0 everywhere. It learns from this replica's own decisions only
// (the index already scores the adapter's cached blocks; this is the
// adapter's weights held in the engine's LoRA slots, which no event
// reports). Reads: the request's lora_name, the Decider's adapter table.
// Alpha.
type LoraAffinity struct{}

func (LoraAffinity) Name() string         { return "lora-affinity" }
func (LoraAffinity) Stability() Stability { return Alpha }
func (LoraAffinity) Score(c *Context, cands []scheduling.Candidate, dst []float64) ([]float64, error) {
	dst = append(dst[:0], make([]float64, len(cands))...)
	if c.Lora == "" || c.Adapters == nil {
		return dst, nil
	}
	for i, cand := range cands {
		if !c.Adapters.Warm(c.Lora, cand.Worker, c.Now) {
			dst[i] = 1
		}
	}
	return dst, nil
}

// LoraWarmFor is how long a rank counts as holding an adapter after a
// request of it was routed there (vLLM keeps up to --max-loras adapters
// on the GPU and evicts the least recently used).
const LoraWarmFor = 5 * time.Minute

// Bounds of the adapter table: adapters remembered (least recently
// routed forgotten first) and ranks per adapter.
const (
	maxAdapters       = 1024
	maxRanksPerAdaptr = 64
)

// Adapters remembers which ranks recently served which LoRA adapter.
// Bounded: maxAdapters adapters × maxRanksPerAdaptr ranks.
type Adapters struct {
	byName map[string]*adapterRanks
}

type adapterRanks struct {
	last  int64 // Unix nanoseconds of the adapter's last route
	ranks map[kv.WorkerWithDpRank]int64
}

// Warm reports whether rank w served adapter name within LoraWarmFor of now.
func (a *Adapters) Warm(name string, w kv.WorkerWithDpRank, now int64) bool {
	ar := a.byName[name]
	if ar == nil {
		return false
	}
	at, ok := ar.ranks[w]
	return ok && now-at <= int64(LoraWarmFor)
}

// Routed records that adapter name was routed to rank w at now.
func (a *Adapters) Routed(name string, w kv.WorkerWithDpRank, now int64) {
	if name == "" {
		return
	}
	if a.byName == nil {
		a.byName = map[string]*adapterRanks{}
	}
	ar := a.byName[name]
	if ar == nil {
		if len(a.byName) >= maxAdapters {
			a.evictOldest()
		}
		ar = &adapterRanks{ranks: map[kv.WorkerWithDpRank]int64{}}
		a.byName[name] = ar
	}
	ar.last = now
	if _, ok := ar.ranks[w]; !ok && len(ar.ranks) >= maxRanksPerAdaptr {
		var oldest kv.WorkerWithDpRank
		first := true
		for r, at := range ar.ranks {
			if first || at < ar.ranks[oldest] {
				oldest, first = r, false
			}
		}
		delete(ar.ranks, oldest)
	}
	ar.ranks[w] = now
}

// Len is the number of adapters remembered.
func (a *Adapters) Len() int { return len(a.byName) }

func (a *Adapters) evictOldest() {
	var oldest string
	first := true
	for name, ar := range a.byName {
		if first || ar.last < a.byName[oldest].last {
			oldest, first = name, false
		}
	}
	delete(a.byName, oldest)
}
