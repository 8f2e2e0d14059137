package index

import (
	"fmt"

	"github.com/kvrouter/kvrouter/kv"
)

// TierMatch is one rank's overlap with a prompt across storage tiers.
type TierMatch struct {
	Device   uint32 // consecutive blocks from block 0 on the device tier
	Host     uint32 // blocks continuing that prefix on the host-pinned tier
	Disk     uint32 // blocks continuing device+host on the disk tier
	TreeSize uint64 // blocks the rank holds on the device tier
}

// TieredMatches is the answer of an Indexer to a prompt, per rank. Ranks
// with no overlap on any tier are absent.
type TieredMatches = map[kv.WorkerWithDpRank]TierMatch

// Indexer is the index of one shard: a Tree per storage tier. Only the
// device tier earns full credit; host and disk count blocks a rank could
// copy back, continuing its device prefix. The external tier (a remote or
// network store a rank can load from) continues device+host+disk and is
// scored in the disk bucket, as Dynamo scores its External tier with the
// disk weight.
type Indexer struct {
	tiers [kv.NumTiers]*Tree
	// scratch for tier walks, reused across FindMatches calls
	depths []rankDepth
	// merged is AppendMatches's scratch when lower tiers hold blocks
	merged TieredMatches
}

// New returns an empty indexer.
func New() *Indexer {
	x := &Indexer{}
	for i := range x.tiers {
		x.tiers[i] = NewTree()
	}
	return x
}

// Tier returns the tree of one tier (nil for an unknown tier).
func (x *Indexer) Tier(t kv.StorageTier) *Tree {
	if t >= kv.NumTiers {
		return nil
	}
	return x.tiers[t]
}

// Apply routes an event to its tier's tree. A Cleared event empties the
// rank that sent it on every tier, whichever tier it names: Dynamo applies
// a clear without a residency domain (every engine's) to its primary index
// and to every lower-tier index alike (ResetScope::All), because an engine
// that resets or restarts has lost whatever it had offloaded as well. The
// worker's other dp ranks keep their blocks.
func (x *Indexer) Apply(ev *kv.Event) error {
	if ev == nil {
		return x.tiers[kv.TierDevice].Apply(ev) // counts and reports it
	}
	if ev.Tier >= kv.NumTiers {
		x.tiers[kv.TierDevice].counters.InvalidEvent++
		return fmt.Errorf("event %d from %s has unknown tier %d: %w", ev.EventID, ev.Worker, ev.Tier, ErrInvalidEvent)
	}
	if err := x.tiers[ev.Tier].Apply(ev); err != nil {
		return fmt.Errorf("%s tier: %w", ev.Tier, err)
	}
	if ev.Kind == kv.EventCleared {
		// The named tier counted the event; the others count its blocks.
		for i, t := range x.tiers {
			if kv.StorageTier(i) != ev.Tier {
				t.counters.ClearedBlocks += uint64(t.clearRank(ev.Worker))
			}
		}
	}
	return nil
}

// FindMatches scores a prompt's local block hashes against every tier.
// For each rank, Device is its device prefix; Host counts the host-tier
// blocks right after that prefix (the rank's host prefix minus its device
// prefix); Disk counts disk-tier blocks right after device+host, then
// external-tier blocks right after device+host+disk.
func (x *Indexer) FindMatches(hashes []kv.LocalBlockHash) TieredMatches {
	return x.FindMatchesInto(nil, hashes)
}

// FindMatchesInto is FindMatches writing into out, which it clears first
// (nil allocates a map). A shard reuses one map for every lookup: at
// thousands of workers a fresh map per lookup was a large part of what a
// lookup allocates, and allocation during a GC cycle is paid in marking.
func (x *Indexer) FindMatchesInto(out TieredMatches, hashes []kv.LocalBlockHash) TieredMatches {
	dev := x.tiers[kv.TierDevice]
	x.depths = dev.matchDepths(hashes, x.depths[:0])
	if out == nil {
		out = make(TieredMatches, len(x.depths))
	} else {
		clear(out)
	}
	for _, d := range x.depths {
		rs := &dev.ranks[d.id]
		out[rs.rank] = TierMatch{Device: d.depth, TreeSize: uint64(rs.blocks.len())}
	}
	x.continueTier(out, kv.TierHostPinned, hashes)
	x.continueTier(out, kv.TierDisk, hashes)
	x.continueTier(out, kv.TierExternal, hashes)
	return out
}

// continueTier adds a lower tier's contribution: blocks the rank holds in
// that tier beyond what higher tiers already cover.
func (x *Indexer) continueTier(out TieredMatches, tier kv.StorageTier, hashes []kv.LocalBlockHash) {
	t := x.tiers[tier]
	if t.entries == 0 {
		return
	}
	x.depths = t.matchDepths(hashes, x.depths[:0])
	for _, d := range x.depths {
		r := t.ranks[d.id].rank
		m, ok := out[r]
		if !ok {
			m.TreeSize = x.deviceSize(r)
		}
		covered := m.Device + m.Host
		if tier == kv.TierExternal {
			covered += m.Disk
		}
		if d.depth <= covered {
			continue
		}
		extra := d.depth - covered
		switch tier {
		case kv.TierHostPinned:
			m.Host = extra
		case kv.TierExternal:
			m.Disk += extra
		default:
			m.Disk = extra
		}
		out[r] = m
	}
}

func (x *Indexer) deviceSize(r kv.WorkerWithDpRank) uint64 {
	dev := x.tiers[kv.TierDevice]
	if id, ok := dev.ids[r]; ok {
		return uint64(dev.ranks[id].blocks.len())
	}
	return 0
}

// RemoveWorker drops every rank of a worker from every tier.
func (x *Indexer) RemoveWorker(w kv.WorkerID) {
	for _, t := range x.tiers {
		t.RemoveWorker(w)
	}
}

// WorkerBlockCounts returns the device-tier block count of every rank.
func (x *Indexer) WorkerBlockCounts() map[kv.WorkerWithDpRank]uint64 {
	return x.tiers[kv.TierDevice].WorkerBlockCounts()
}

// Len is the number of (rank, block) entries on the device tier.
func (x *Indexer) Len() int { return x.tiers[kv.TierDevice].Len() }

// Counters sums the counters of all tiers.
func (x *Indexer) Counters() Counters {
	var c Counters
	for _, t := range x.tiers {
		c.Add(t.counters)
	}
	return c
}

// CounterMap returns Counters keyed by snake_case name.
func (x *Indexer) CounterMap() map[string]uint64 { return x.Counters().Map() }

// Digest combines the digests of all tiers; a block moving between tiers
// changes it.
func (x *Indexer) Digest() uint64 {
	var d uint64
	for i, t := range x.tiers {
		d += mix64(t.Digest() ^ uint64(i+1)*0x9e3779b97f4a7c15)
	}
	return d
}

// Dump returns every tier's Dump, device first, with Tier set and event
// ids numbered across the whole dump.
func (x *Indexer) Dump() []kv.Event {
	n := 0
	for _, t := range x.tiers {
		n += t.entries
	}
	out := make([]kv.Event, 0, n)
	for i, t := range x.tiers {
		for ev := range t.DumpSeq() {
			ev.Tier = kv.StorageTier(i)
			ev.EventID = uint64(len(out))
			out = append(out, ev)
		}
	}
	return out
}

// CheckInvariants checks every tier.
func (x *Indexer) CheckInvariants() error {
	for i, t := range x.tiers {
		if err := t.CheckInvariants(); err != nil {
			return fmt.Errorf("%s tier: %w", kv.StorageTier(i), err)
		}
	}
	return nil
}
