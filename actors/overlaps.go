package actors

import (
	"slices"

	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// overlapRow is one rank's overlap as a decision reads it.
type overlapRow struct {
	device, host, disk uint32
	tree               uint64
	// predicted: device comes from this replica's routing predictions;
	// confirmed is the engine-confirmed part.
	predicted bool
	confirmed uint32
}

// packOverlaps turns a shard's matches into the reply's arrays, sorted by
// rank. predicted holds the confirmed depth of the rows whose device
// depth is predicted (nil when none is). scratch is reused for the sort
// and returned for the next call. A shard without predictions gets its
// matches in rank order from the index and calls packSorted directly.
func packOverlaps(matches map[kv.WorkerWithDpRank]index.TierMatch, predicted map[kv.WorkerWithDpRank]uint32,
	scratch []index.RankMatch) (*messages.RankOverlaps, []index.RankMatch) {
	entries := scratch[:0]
	for w, t := range matches {
		entries = append(entries, index.RankMatch{Rank: w, TierMatch: t})
	}
	slices.SortFunc(entries, func(a, b index.RankMatch) int { return kv.CompareRanks(a.Rank, b.Rank) })
	return packSorted(entries, predicted), entries[:0]
}

// packSorted builds the reply's arrays from matches already in rank order.
func packSorted(entries []index.RankMatch, predicted map[kv.WorkerWithDpRank]uint32) *messages.RankOverlaps {
	r := newRankOverlaps(len(entries))
	for i, e := range entries {
		w, t := e.Rank, e.TierMatch
		r.WorkerIds[i], r.DpRanks[i], r.TreeSizes[i] = uint64(w.WorkerID), w.DpRank, t.TreeSize
		r.DeviceBlocks[i], r.HostBlocks[i], r.DiskBlocks[i] = t.Device, t.Host, t.Disk
		if confirmed, ok := predicted[w]; ok {
			r.PredictedRows = append(r.PredictedRows, uint32(i))
			r.ConfirmedDeviceBlocks = append(r.ConfirmedDeviceBlocks, confirmed)
		}
	}
	return r
}

// overlapSet is a decision's shard replies. Every worker lives on one
// shard, so a rank is in at most one run, and each run is sorted: a walk
// over ranks in order reads every run once, with no map built per
// decision (at 7,000 workers that map was most of a lookup's cost).
type overlapSet struct {
	runs []*messages.RankOverlaps
	pos  []int // the cursor of each run, for a walk in rank order
	last kv.WorkerWithDpRank
}

func (s *overlapSet) reset(shards int) {
	s.runs = s.runs[:0]
	s.pos = s.pos[:0]
	if cap(s.runs) < shards {
		s.runs = make([]*messages.RankOverlaps, 0, shards)
		s.pos = make([]int, 0, shards)
	}
	s.last = kv.WorkerWithDpRank{}
}

// add takes one shard's reply (nil or empty when it holds nothing).
func (s *overlapSet) add(r *messages.RankOverlaps) {
	if r == nil || len(r.WorkerIds) == 0 || !wellFormed(r) {
		return
	}
	s.runs = append(s.runs, r)
	s.pos = append(s.pos, 0)
}

// wellFormed checks the arrays line up (a reply is built by packOverlaps,
// but the walk must not index past an array whatever it is handed).
func wellFormed(r *messages.RankOverlaps) bool {
	n := len(r.WorkerIds)
	return len(r.DpRanks) == n && len(r.DeviceBlocks) == n && len(r.HostBlocks) == n &&
		len(r.DiskBlocks) == n && len(r.TreeSizes) == n && len(r.PredictedRows) == len(r.ConfirmedDeviceBlocks)
}

func rankAt(r *messages.RankOverlaps, i int) kv.WorkerWithDpRank {
	return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(r.WorkerIds[i]), DpRank: r.DpRanks[i]}
}

func rowAt(r *messages.RankOverlaps, i int) overlapRow {
	row := overlapRow{device: r.DeviceBlocks[i], host: r.HostBlocks[i], disk: r.DiskBlocks[i], tree: r.TreeSizes[i]}
	if len(r.PredictedRows) > 0 {
		if k, ok := slices.BinarySearch(r.PredictedRows, uint32(i)); ok {
			row.predicted, row.confirmed = true, r.ConfirmedDeviceBlocks[k]
		}
	}
	return row
}

// next returns w's overlap; calls with ascending ranks (a sorted
// candidate list) walk each run once. A rank below the last one asked
// restarts the walk, so any order is answered correctly.
func (s *overlapSet) next(w kv.WorkerWithDpRank) (overlapRow, bool) {
	if kv.CompareRanks(w, s.last) < 0 {
		clear(s.pos)
	}
	s.last = w
	for k, r := range s.runs {
		i := s.pos[k]
		for i < len(r.WorkerIds) && kv.CompareRanks(rankAt(r, i), w) < 0 {
			i++
		}
		s.pos[k] = i
		if i < len(r.WorkerIds) && rankAt(r, i) == w {
			return rowAt(r, i), true
		}
	}
	return overlapRow{}, false
}

// find returns w's overlap by binary search (one rank, any time).
func (s *overlapSet) find(w kv.WorkerWithDpRank) (overlapRow, bool) {
	for _, r := range s.runs {
		// The first row of w's worker (one row per dp rank, ranks ascending).
		i, ok := slices.BinarySearch(r.WorkerIds, uint64(w.WorkerID))
		for ; ok && i < len(r.WorkerIds) && r.WorkerIds[i] == uint64(w.WorkerID); i++ {
			if r.DpRanks[i] == w.DpRank {
				return rowAt(r, i), true
			}
		}
	}
	return overlapRow{}, false
}

// every is the overlap of each rank of list (sorted), zeros for a rank
// holding nothing: the overlap-scores answer, as arrays.
func (s *overlapSet) every(list []kv.WorkerWithDpRank) *messages.RankOverlaps {
	n := len(list)
	r := newRankOverlaps(n)
	for i, w := range list {
		r.WorkerIds[i], r.DpRanks[i] = uint64(w.WorkerID), w.DpRank
		row, ok := s.next(w)
		if !ok {
			continue
		}
		r.DeviceBlocks[i], r.HostBlocks[i], r.DiskBlocks[i], r.TreeSizes[i] = row.device, row.host, row.disk, row.tree
		if row.predicted {
			r.PredictedRows = append(r.PredictedRows, uint32(i))
			r.ConfirmedDeviceBlocks = append(r.ConfirmedDeviceBlocks, row.confirmed)
		}
	}
	return r
}

// newRankOverlaps returns arrays for n rows in two allocations (the
// capacities are cut, so appending to one array cannot run into another).
func newRankOverlaps(n int) *messages.RankOverlaps {
	u32 := make([]uint32, 4*n) // dp ranks, device, host, disk
	u64 := make([]uint64, 2*n) // worker ids, tree sizes
	return &messages.RankOverlaps{
		WorkerIds: u64[:n:n], TreeSizes: u64[n:],
		DpRanks: u32[:n:n], DeviceBlocks: u32[n : 2*n : 2*n], HostBlocks: u32[2*n : 3*n : 3*n], DiskBlocks: u32[3*n:],
	}
}

// Predicted reports whether w's device overlap is this replica's routing
// prediction, and its engine-confirmed part (decide.Overlaps).
func (s *overlapSet) Predicted(w kv.WorkerWithDpRank) (uint32, bool) {
	o, ok := s.find(w)
	return o.confirmed, ok && o.predicted
}
