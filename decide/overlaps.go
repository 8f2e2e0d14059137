package decide

import (
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// OverlapRow is one rank's overlap as a decision reads it.
type OverlapRow struct {
	Device, Host, Disk uint32
	Tree               uint64
	// Predicted: Device comes from this replica's routing predictions;
	// Confirmed is the engine-confirmed part.
	Predicted bool
	Confirmed uint32
}

// PackOverlaps turns a shard's matches into the reply's arrays, sorted by
// rank. predicted holds the confirmed depth of the rows whose device
// depth is predicted (nil when none is). scratch is reused for the sort
// and returned for the next call. A shard without predictions gets its
// matches in rank order from the index and calls PackSorted directly.
func PackOverlaps(matches map[kv.WorkerWithDpRank]index.TierMatch, predicted map[kv.WorkerWithDpRank]uint32,
	scratch []index.RankMatch) (*messages.RankOverlaps, []index.RankMatch) {
	entries := scratch[:0]
	for w, t := range matches {
		entries = append(entries, index.RankMatch{Rank: w, TierMatch: t})
	}
	slices.SortFunc(entries, func(a, b index.RankMatch) int { return kv.CompareRanks(a.Rank, b.Rank) })
	return PackSorted(entries, predicted), entries[:0]
}

// PackSorted builds the reply's arrays from matches already in rank order.
func PackSorted(entries []index.RankMatch, predicted map[kv.WorkerWithDpRank]uint32) *messages.RankOverlaps {
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

// OverlapSet is a decision's shard replies. Every worker lives on one
// shard, so a rank is in at most one run, and each run is sorted: a walk
// over ranks in order reads every run once, with no map built per
// decision (at 7,000 workers that map was most of a lookup's cost).
type OverlapSet struct {
	runs []*messages.RankOverlaps
	pos  []int // the cursor of each run, for a walk in rank order
	last kv.WorkerWithDpRank
}

func (s *OverlapSet) Reset(shards int) {
	s.runs = s.runs[:0]
	s.pos = s.pos[:0]
	if cap(s.runs) < shards {
		s.runs = make([]*messages.RankOverlaps, 0, shards)
		s.pos = make([]int, 0, shards)
	}
	s.last = kv.WorkerWithDpRank{}
}

// add takes one shard's reply (nil or empty when it holds nothing).
func (s *OverlapSet) Add(r *messages.RankOverlaps) {
	if r == nil || len(r.WorkerIds) == 0 || !wellFormed(r) {
		return
	}
	s.runs = append(s.runs, r)
	s.pos = append(s.pos, 0)
}

// wellFormed checks the arrays line up (a reply is built by PackOverlaps,
// but the walk must not index past an array whatever it is handed).
func wellFormed(r *messages.RankOverlaps) bool {
	n := len(r.WorkerIds)
	return len(r.DpRanks) == n && len(r.DeviceBlocks) == n && len(r.HostBlocks) == n &&
		len(r.DiskBlocks) == n && len(r.TreeSizes) == n && len(r.PredictedRows) == len(r.ConfirmedDeviceBlocks)
}

func rankAt(r *messages.RankOverlaps, i int) kv.WorkerWithDpRank {
	return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(r.WorkerIds[i]), DpRank: r.DpRanks[i]}
}

func rowAt(r *messages.RankOverlaps, i int) OverlapRow {
	row := OverlapRow{Device: r.DeviceBlocks[i], Host: r.HostBlocks[i], Disk: r.DiskBlocks[i], Tree: r.TreeSizes[i]}
	if len(r.PredictedRows) > 0 {
		if k, ok := slices.BinarySearch(r.PredictedRows, uint32(i)); ok {
			row.Predicted, row.Confirmed = true, r.ConfirmedDeviceBlocks[k]
		}
	}
	return row
}

// next returns w's overlap; calls with ascending ranks (a sorted
// candidate list) walk each run once. A rank below the last one asked
// restarts the walk, so any order is answered correctly.
func (s *OverlapSet) Next(w kv.WorkerWithDpRank) (OverlapRow, bool) {
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
	return OverlapRow{}, false
}

// find returns w's overlap by binary search (one rank, any time).
func (s *OverlapSet) Find(w kv.WorkerWithDpRank) (OverlapRow, bool) {
	for _, r := range s.runs {
		// The first row of w's worker (one row per dp rank, ranks ascending).
		i, ok := slices.BinarySearch(r.WorkerIds, uint64(w.WorkerID))
		for ; ok && i < len(r.WorkerIds) && r.WorkerIds[i] == uint64(w.WorkerID); i++ {
			if r.DpRanks[i] == w.DpRank {
				return rowAt(r, i), true
			}
		}
	}
	return OverlapRow{}, false
}

// every is the overlap of each rank of list (sorted), zeros for a rank
// holding nothing: the overlap-scores answer, as arrays.
func (s *OverlapSet) Every(list []kv.WorkerWithDpRank) *messages.RankOverlaps {
	n := len(list)
	r := newRankOverlaps(n)
	for i, w := range list {
		r.WorkerIds[i], r.DpRanks[i] = uint64(w.WorkerID), w.DpRank
		row, ok := s.Next(w)
		if !ok {
			continue
		}
		r.DeviceBlocks[i], r.HostBlocks[i], r.DiskBlocks[i], r.TreeSizes[i] = row.Device, row.Host, row.Disk, row.Tree
		if row.Predicted {
			r.PredictedRows = append(r.PredictedRows, uint32(i))
			r.ConfirmedDeviceBlocks = append(r.ConfirmedDeviceBlocks, row.Confirmed)
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
func (s *OverlapSet) Predicted(w kv.WorkerWithDpRank) (uint32, bool) {
	o, ok := s.Find(w)
	return o.Confirmed, ok && o.Predicted
}

// Join builds the candidates of a decision over eligible: each rank's
// overlap from the shards' replies (o), and its load from its reply when
// it was asked (loads: it shares the prompt's prefix), else from its
// publication on the Board. (Decide folds in the decisions the loads do
// not show yet and zeroes untracked blocks.) The slice is the Decider's
// scratch, valid until the next Join: its owner uses it within the
// message it handles (64 candidates were a quarter of the bytes a
// decision allocated).
func (d *Decider) Join(eligible []kv.WorkerWithDpRank, r *Ranks, o *OverlapSet, loads map[kv.WorkerWithDpRank]*messages.LoadReply,
	blocks int, shared uint32, now time.Time) []scheduling.Candidate {
	cands := d.cands[:0]
	defer func() { d.cands = cands[:0] }()
	promptBlocks := uint64(blocks)
	nowUnixNano := now.UnixNano()
	entry := d.board.Entries(eligible)
	// Only the ranks that share the prompt's prefix were asked for a
	// load, often a few of many: with an aligned board their candidates
	// are found by position afterwards, not by a map lookup per rank.
	byPosition := entry.aligned
	for i, w := range eligible {
		// Filled in place: a candidate is ~150 bytes, and building it on
		// the stack and appending copied it once more per rank.
		cands = append(cands, scheduling.Candidate{Worker: w, NewBlocks: promptBlocks, SharedOverlap: shared})
		c := &cands[len(cands)-1]
		if row, ok := o.Next(w); ok {
			c.DeviceOverlap, c.HostOverlap, c.DiskOverlap = row.Device, row.Host, row.Disk
		}
		if !byPosition {
			if l := loads[w]; l != nil {
				fillFromReply(c, l, promptBlocks)
			}
		}
		if !c.HasLoad {
			entry.At(i, w).Fill(c, promptBlocks, nowUnixNano)
		}
		if len(r.Capacity) > 0 {
			c.CapacityBlocks = r.Capacity[w]
		}
	}
	if byPosition {
		for w, l := range loads {
			if i, ok := entry.Position(w); ok && i < len(cands) && cands[i].Worker == w {
				fillFromReply(&cands[i], l, promptBlocks)
			}
		}
	}
	return cands
}

// fillFromReply sets a candidate's load from its rank's LoadReply,
// replacing what the board's publication gave it.
func fillFromReply(c *scheduling.Candidate, l *messages.LoadReply, promptBlocks uint64) {
	c.HasLoad = true
	c.ActivePrefillTokens = l.ActivePrefillTokens
	c.ActiveBlocks = l.ActiveBlocks
	c.NewBlocks = l.NewBlocks
	c.ActiveRequests = int(l.ActiveRequests)
	c.ActivePrefixBlocks = uint32(promptBlocks - min(l.NewBlocks, promptBlocks))
	c.HeadPrefillTokens = l.HeadPrefillTokens
	c.HeadPrefillElapsed = time.Duration(l.HeadPrefillElapsedNanos)
	c.PrefillTokensPerSec = l.PrefillTokensPerSec
}
