package actors

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/registry"
)

// HeldBlocksStat is the one shard statistic in Status.IndexCounters that
// is a current value, not a total: the blocks held for workers not yet
// registered. Metrics export it as a gauge.
const HeldBlocksStat = "held_blocks"

// RankStatus is one worker rank as the replica sees it.
type RankStatus struct {
	DpRank uint32 `json:"dp_rank"`
	// State is kv.WorkerState's name: only "active" ranks take new requests.
	State               string  `json:"state"`
	IndexedBlocks       uint64  `json:"indexed_blocks"`
	ActiveRequests      uint32  `json:"active_requests"`
	ActivePrefillTokens uint64  `json:"active_prefill_tokens"`
	ActiveDecodeBlocks  float64 `json:"active_decode_blocks"`
	// PrefillTokensPerSec is the rank's measured prefill throughput
	// (scheduling.PrefillRate, read by the ttft cost); 0 until measured.
	PrefillTokensPerSec float64 `json:"prefill_tokens_per_sec,omitempty"`
	// IndexTrust is how far the KV event index is believed for this rank
	// (exact, degraded, untrusted: docs/index-trust.md), with its cause.
	IndexTrust RankTrust `json:"index_trust"`
}

// WorkerStatus is one registered worker with its ranks.
type WorkerStatus struct {
	WorkerID              uint64 `json:"worker_id"`
	URL                   string `json:"url,omitempty"`
	ModelName             string `json:"model_name,omitempty"`
	DataParallelStartRank uint32 `json:"data_parallel_start_rank"`
	DataParallelSize      uint32 `json:"data_parallel_size"`
	TotalKVBlocks         uint64 `json:"total_kv_blocks,omitempty"`
	// Role is prefill, decode or both (kv.Role).
	Role                  string       `json:"role"`
	Static                bool         `json:"static"`
	LastSeenUnixNano      int64        `json:"last_seen_unix_nano"`
	Draining              bool         `json:"draining,omitempty"`
	DrainingSinceUnixNano int64        `json:"draining_since_unix_nano,omitempty"`
	Unhealthy             bool         `json:"unhealthy,omitempty"`
	BusyRanks             []uint32     `json:"busy_ranks,omitempty"`
	Ranks                 []RankStatus `json:"ranks"`
}

// Status is the replica's view of the fleet.
type Status struct {
	Workers         []WorkerStatus    `json:"workers"`
	QueueDepth      uint32            `json:"queue_depth"`
	TrackedRequests uint64            `json:"tracked_requests"`
	IndexCounters   map[string]uint64 `json:"index_counters"`
	// IndexDigest fingerprints the indexed content (index.Tree.Digest):
	// replicas that applied the same events agree on it. Only computed on
	// request (GET /workers?digest=1); absent otherwise.
	IndexDigest uint64 `json:"index_digest,omitempty"`
	// RegistryDigest summarises the registered workers, their ranks and
	// drains (registry.Registry.Digest): replicas fed by the same
	// discovery sources agree on it.
	RegistryDigest uint64 `json:"registry_digest"`
	// UnregisteredIndexed counts blocks indexed for workers that never
	// registered (events can precede the first heartbeat).
	UnregisteredIndexed map[string]uint64 `json:"unregistered_indexed,omitempty"`
	// IndexTrustTransitions counts the ranks' trust changes by target
	// state and reason ("untrusted/stale_stream": n).
	IndexTrustTransitions map[string]uint64 `json:"index_trust_transitions,omitempty"`
}

// Status gathers the registry, each shard's blocks and counters, and
// each rank's load; the index digest only when withDigest is set (it walks
// the whole index: see digestGate). A metrics scrape never asks for it.
func (r *Router) Status(ctx context.Context, withDigest bool) (*Status, error) {
	reg, err := r.Registry(ctx)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	shards, err := r.ShardStats(ctx, withDigest)
	if err != nil {
		return nil, err
	}
	loads, err := r.PotentialLoads(ctx, nil, "")
	if err != nil {
		return nil, fmt.Errorf("loads: %w", err)
	}
	blocks := map[kv.WorkerWithDpRank]uint64{}
	st := &Status{QueueDepth: reg.QueueDepth, TrackedRequests: reg.TrackedRequests, IndexCounters: map[string]uint64{},
		RegistryDigest: reg.Digest}
	for _, sh := range shards {
		for _, b := range sh.Blocks {
			blocks[rankOf(b.Worker)] = b.Blocks
		}
		for k, v := range sh.Counters {
			st.IndexCounters[k] += v
		}
		st.IndexDigest += sh.Digest
	}
	load := map[kv.WorkerWithDpRank]*messages.PotentialLoad{}
	for _, l := range loads.Loads {
		load[rankOf(l.Worker)] = l
	}
	registered := map[kv.WorkerWithDpRank]bool{}
	for _, w := range reg.Workers {
		hb := w.Worker
		ws := WorkerStatus{
			WorkerID: hb.WorkerId, URL: hb.Url, ModelName: hb.ModelName,
			DataParallelStartRank: hb.DataParallelStartRank, DataParallelSize: max(hb.DataParallelSize, 1),
			TotalKVBlocks: hb.TotalKvBlocks, Role: roleOf(hb.Role).String(), Static: w.Static, LastSeenUnixNano: w.LastSeenUnixNano,
			Draining: w.Draining, DrainingSinceUnixNano: w.DrainingSinceUnixNano, Unhealthy: w.Unhealthy, BusyRanks: w.BusyRanks,
		}
		cond := registry.Conditions{Draining: w.Draining, Unhealthy: w.Unhealthy, BusyRanks: w.BusyRanks}
		for rk := hb.DataParallelStartRank; rk < hb.DataParallelStartRank+ws.DataParallelSize; rk++ {
			key := kv.WorkerWithDpRank{WorkerID: kv.WorkerID(hb.WorkerId), DpRank: rk}
			registered[key] = true
			rs := RankStatus{DpRank: rk, State: cond.State(rk).String(), IndexedBlocks: blocks[key], IndexTrust: r.IndexTrust(key)}
			if l := load[key]; l != nil {
				rs.ActiveRequests = l.ActiveRequests
				rs.ActivePrefillTokens = l.PotentialPrefillTokens
				rs.ActiveDecodeBlocks = l.PotentialDecodeBlocks
				rs.PrefillTokensPerSec = l.PrefillTokensPerSec
			}
			ws.Ranks = append(ws.Ranks, rs)
		}
		st.Workers = append(st.Workers, ws)
	}
	for w, n := range blocks {
		if !registered[w] && n > 0 {
			if st.UnregisteredIndexed == nil {
				st.UnregisteredIndexed = map[string]uint64{}
			}
			st.UnregisteredIndexed[w.String()] = n
		}
	}
	slices.SortFunc(st.Workers, func(a, b WorkerStatus) int { return cmp.Compare(a.WorkerID, b.WorkerID) })
	st.IndexTrustTransitions = r.IndexTrustTransitions()
	return st, nil
}
