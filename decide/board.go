package decide

import (
	"slices"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// Board is the scheduler's copy of every rank's published load
// (RankLoad): a decision reads loads here instead of asking each rank, and
// asks (LoadQuery) only the ranks whose roots show they share the prompt's
// prefix, the one prompt-dependent part of a load. It is the scheduler's
// state, built only from the messages the sequence actors send it.
type Board struct {
	ranks map[kv.WorkerWithDpRank]*BoardEntry
	// at is ranks in the order of list, the rank list last synced: a
	// decision over every rank reads its entries by position (hashing a
	// rank key 64 times per decision was ~10% of a query's CPU).
	at   []*BoardEntry
	list []kv.WorkerWithDpRank
	// rootRanks counts, per root, the ranks holding it: a prompt whose
	// first hash no rank holds asks nobody, without visiting the ranks.
	rootRanks map[uint64]int32
	// unseen is Σ over ranks of the adds sent that the rank's published
	// load does not include yet: while it is 0 no decision has to fold in
	// recorded decisions (the common case), so none scans for them.
	unseen uint64
	// routed are the last decisions recorded, numbered by routedSeq: a
	// decision still collecting loads when they were recorded adds them
	// to its candidates (scheduling.AddRouted), as a sequential scheduler
	// would have seen them.
	routed    []routedEntry
	routedSeq uint64
}

type BoardEntry struct {
	pid  string             // the sequence actor the entry follows
	load *messages.RankLoad // nil until its first publication
	// loadAt is when load arrived (Unix ns), for a route receipt's ages.
	loadAt int64
	roots  map[uint64]struct{}
	// sent counts this scheduler's AddRequests to the rank; applied is
	// how many of them load includes.
	sent, applied uint64
	dropped       bool // the rank left the board (unregistered, or a new actor)
	// at is the entry's position in the list last synced.
	at int
}

func NewBoard() *Board {
	return &Board{ranks: map[kv.WorkerWithDpRank]*BoardEntry{}, rootRanks: map[uint64]int32{}}
}

// Sync follows a new rank table (list, each rank's sequence actor named
// by pid; ok false: not registered): ranks gone are dropped, and a rank
// that is new or has a new sequence actor (re-registered) starts over;
// ask is called for those, to request a full RankLoad.
func (b *Board) Sync(list []kv.WorkerWithDpRank, pid func(kv.WorkerWithDpRank) (string, bool), ask func(w kv.WorkerWithDpRank)) {
	for w, e := range b.ranks {
		if id, ok := pid(w); !ok || id != e.pid {
			b.unseen -= e.sent - e.applied
			b.dropRoots(e)
			e.dropped = true
			delete(b.ranks, w)
		}
	}
	b.at = make([]*BoardEntry, len(list))
	for i, w := range list {
		e, ok := b.ranks[w]
		if !ok {
			id, _ := pid(w)
			e = &BoardEntry{pid: id, roots: map[uint64]struct{}{}}
			b.ranks[w] = e
			ask(w)
		}
		b.at[i] = e
		e.at = i
	}
	b.list = list
}

// Entries returns a lookup of eligible's entries: by position when
// eligible is the synced list itself (a decision without constraints),
// else by key.
func (b *Board) Entries(eligible []kv.WorkerWithDpRank) BoardLookup {
	aligned := len(eligible) == len(b.list) && (len(eligible) == 0 || &eligible[0] == &b.list[0])
	return BoardLookup{b: b, aligned: aligned}
}

// BoardLookup finds the entry of the i-th eligible rank w (a value, so a
// decision's lookups allocate nothing).
type BoardLookup struct {
	b       *Board
	aligned bool
}

// Position is where the rank's candidate is when the lookup is aligned
// (ok false: it is not, or w is not on the board).
func (l BoardLookup) Position(w kv.WorkerWithDpRank) (int, bool) {
	if !l.aligned {
		return 0, false
	}
	e := l.b.ranks[w]
	if e == nil {
		return 0, false
	}
	return e.at, true
}

func (l BoardLookup) At(i int, w kv.WorkerWithDpRank) *BoardEntry {
	if l.aligned {
		return l.b.at[i]
	}
	return l.b.ranks[w]
}

func (b *Board) addRoot(e *BoardEntry, h uint64) {
	if _, ok := e.roots[h]; !ok {
		e.roots[h] = struct{}{}
		b.rootRanks[h]++
	}
}

func (b *Board) removeRoot(e *BoardEntry, h uint64) {
	if _, ok := e.roots[h]; ok {
		delete(e.roots, h)
		if b.rootRanks[h]--; b.rootRanks[h] <= 0 {
			delete(b.rootRanks, h)
		}
	}
}

func (b *Board) dropRoots(e *BoardEntry) {
	for h := range e.roots {
		b.removeRoot(e, h)
	}
}

// Held reports whether any rank holds root.
func (b *Board) Held(root uint64) bool { return b.rootRanks[root] > 0 }

// Apply takes a rank's publication, arrived at atUnixNano.
func (b *Board) Apply(m *messages.RankLoad, atUnixNano int64) {
	e := b.ranks[RankOf(m.Worker)]
	if e == nil {
		return // not (or no longer) registered
	}
	if m.Full {
		b.dropRoots(e)
	}
	for _, h := range m.RootsRemoved {
		b.removeRoot(e, h)
	}
	for _, h := range m.RootsAdded {
		b.addRoot(e, h)
	}
	m.RootsAdded, m.RootsRemoved = nil, nil // kept: only the load fields
	e.load, e.loadAt = m, atUnixNano
	if applied := min(m.AddsApplied, e.sent); applied > e.applied {
		b.unseen -= applied - e.applied
		e.applied = applied
	}
}

// sent counts an add sent to w and returns w's entry and the add's
// ordinal on w (nil, 0 for a rank not on the board).
func (b *Board) sent(w kv.WorkerWithDpRank) (*BoardEntry, uint64) {
	e := b.ranks[w]
	if e == nil {
		return nil, 0
	}
	e.sent++
	b.unseen++
	return e, e.sent
}

// SharesPrefix reports whether a prompt whose first sampled sequence
// hash is root shares active blocks with e's rank (sequence.Roots).
func (e *BoardEntry) SharesPrefix(root uint64) bool {
	if e == nil {
		return false
	}
	_, ok := e.roots[root]
	return ok
}

// Applied is how many of this scheduler's adds to w its published load
// includes.
func (b *Board) Applied(w kv.WorkerWithDpRank) uint64 {
	if e := b.ranks[w]; e != nil {
		return e.applied
	}
	return 0
}

// Fill sets c's load from its rank's publication (e), for a prompt that
// shares no active block with it (NewBlocks is the whole prompt). A rank
// that has published nothing yet is idle.
func (e *BoardEntry) Fill(c *scheduling.Candidate, promptBlocks uint64, nowUnixNano int64) {
	c.HasLoad, c.NewBlocks = true, promptBlocks
	if e == nil || e.load == nil {
		return
	}
	l := e.load
	c.ActivePrefillTokens = l.ActivePrefillTokens
	c.ActiveBlocks = l.ActiveBlocks
	c.ActiveRequests = int(l.ActiveRequests)
	c.PrefillTokensPerSec = l.PrefillTokensPerSec
	if l.HeadPrefillTokens > 0 {
		c.HeadPrefillTokens = l.HeadPrefillTokens
		c.HeadPrefillElapsed = scheduling.SinceHeadStartUnixNano(l.HeadStartedUnixNano, nowUnixNano)
	}
}

// Last is w's last publication (nil: none yet, or not on the board).
func (b *Board) Last(w kv.WorkerWithDpRank) *messages.RankLoad {
	if e := b.ranks[w]; e != nil {
		return e.load
	}
	return nil
}

// maxRouted bounds the recorded decisions kept for the decisions in
// flight: a burst of more concurrent decisions sees only the last ones.
const maxRouted = 256

type routedEntry struct {
	seq uint64 // for reading; the ring's index is derived from it
	// onRank numbers the decision among the adds sent to its rank
	// (Board.sent): a load that applied fewer does not include it.
	// entry is the rank's board entry (nil: not on the board).
	onRank uint64
	entry  *BoardEntry
	scheduling.Routed
}

// Recorded counts an add sent to r's rank and keeps the decision for the
// decisions in flight (a ring: decision seq lives at index
// (seq−1) % maxRouted).
func (b *Board) Recorded(r scheduling.Routed) {
	entry, onRank := b.sent(r.Worker)
	b.routedSeq++
	e := routedEntry{seq: b.routedSeq, onRank: onRank, entry: entry, Routed: r}
	if len(b.routed) < maxRouted {
		b.routed = append(b.routed, e)
		return
	}
	b.routed[(b.routedSeq-1)%maxRouted] = e
}

// Unseen lists the recorded decisions that a decision's loads (loads:
// the replies it read; every other rank's is its publication) do not
// include, oldest first: those numbered past what their rank had
// applied. Only the last maxRouted are kept. While the board's loads
// include every add and no reply is older than its rank's publication,
// there is nothing to look for (the common case); otherwise the scan goes
// from the newest and, when no reply lags, stops once it found as many
// as the board counts.
func (b *Board) Unseen(loads map[kv.WorkerWithDpRank]*messages.LoadReply) []scheduling.Routed {
	lagging := false
	for w, l := range loads {
		// A reply older than its rank's publication: decisions recorded
		// in between are in the board's count but not in the reply.
		lagging = lagging || l.AddsApplied < b.Applied(w)
	}
	if b.unseen == 0 && !lagging {
		return nil
	}
	var out []scheduling.Routed
	oldest := b.routedSeq - uint64(len(b.routed)) + 1
	for n := b.routedSeq; n >= oldest && n > 0; n-- {
		e := &b.routed[(n-1)%maxRouted]
		if e.entry == nil || e.entry.dropped {
			continue // its rank left: its add went to an actor that is gone
		}
		applied := e.entry.applied
		if l := loads[e.Worker]; l != nil {
			applied = l.AddsApplied
		}
		if e.onRank > applied {
			out = append(out, e.Routed)
			if !lagging && uint64(len(out)) == b.unseen {
				break
			}
		}
	}
	slices.Reverse(out)
	return out
}

// LoadAt is where w's load comes from for a decision that read the
// replies loads (at repliedAt) and when it was taken: a route receipt's
// signal ages.
func (b *Board) LoadAt(w kv.WorkerWithDpRank, loads map[kv.WorkerWithDpRank]*messages.LoadReply, repliedAt int64) (string, int64) {
	if l := loads[w]; l != nil {
		return "reply", repliedAt
	}
	if e := b.ranks[w]; e != nil && e.load != nil {
		return "published", e.loadAt
	}
	return "none", 0
}
