package actors

import (
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// loadBoard is the scheduler's copy of every rank's published load
// (RankLoad): a decision reads loads here instead of asking each rank, and
// asks (LoadQuery) only the ranks whose roots show they share the prompt's
// prefix, the one prompt-dependent part of a load. It is the scheduler's
// state, built only from the messages the sequence actors send it.
type loadBoard struct {
	ranks map[kv.WorkerWithDpRank]*boardEntry
	// at is ranks in the order of view.list, the rank view last synced:
	// a decision over every rank reads its entries by position (hashing a
	// rank key 64 times per decision was ~10% of a query's CPU).
	at   []*boardEntry
	view *rankView
	// rootRanks counts, per root, the ranks holding it: a prompt whose
	// first hash no rank holds asks nobody, without visiting the ranks.
	rootRanks map[uint64]int32
	// unseen is Σ over ranks of the adds sent that the rank's published
	// load does not include yet: while it is 0 no decision has to fold in
	// recorded decisions (the common case), so none scans for them.
	unseen uint64
}

type boardEntry struct {
	pid  string             // the sequence actor the entry follows
	load *messages.RankLoad // nil until its first publication
	// loadAt is when load arrived (Unix ns), for a route receipt's ages.
	loadAt int64
	roots  map[uint64]struct{}
	// sent counts this scheduler's AddRequests to the rank; applied is
	// how many of them load includes.
	sent, applied uint64
	dropped       bool // the rank left the board (unregistered, or a new actor)
}

func newLoadBoard() *loadBoard {
	return &loadBoard{ranks: map[kv.WorkerWithDpRank]*boardEntry{}, rootRanks: map[uint64]int32{}}
}

// sync follows a new rank table: ranks gone are dropped, and a rank that
// is new or has a new sequence actor (re-registered) starts over; ask is
// called for those, to request a full RankLoad.
func (b *loadBoard) sync(v *rankView, ask func(w kv.WorkerWithDpRank)) {
	for w, e := range b.ranks {
		if pid, ok := v.pids[w]; !ok || pid.Id != e.pid {
			b.unseen -= e.sent - e.applied
			b.dropRoots(e)
			e.dropped = true
			delete(b.ranks, w)
		}
	}
	b.at = make([]*boardEntry, len(v.List))
	for i, w := range v.List {
		e, ok := b.ranks[w]
		if !ok {
			e = &boardEntry{pid: v.pids[w].Id, roots: map[uint64]struct{}{}}
			b.ranks[w] = e
			ask(w)
		}
		b.at[i] = e
	}
	b.view = v
}

// entries returns a lookup of eligible's entries: by position when
// eligible is the synced view's own list (a decision without
// constraints), else by key.
func (b *loadBoard) entries(v *rankView, eligible []kv.WorkerWithDpRank) boardLookup {
	aligned := b.view == v && len(eligible) == len(v.List) && (len(eligible) == 0 || &eligible[0] == &v.List[0])
	return boardLookup{b: b, aligned: aligned}
}

// boardLookup finds the entry of the i-th eligible rank w (a value, so a
// decision's lookups allocate nothing).
type boardLookup struct {
	b       *loadBoard
	aligned bool
}

func (l boardLookup) at(i int, w kv.WorkerWithDpRank) *boardEntry {
	if l.aligned {
		return l.b.at[i]
	}
	return l.b.ranks[w]
}

func (b *loadBoard) addRoot(e *boardEntry, h uint64) {
	if _, ok := e.roots[h]; !ok {
		e.roots[h] = struct{}{}
		b.rootRanks[h]++
	}
}

func (b *loadBoard) removeRoot(e *boardEntry, h uint64) {
	if _, ok := e.roots[h]; ok {
		delete(e.roots, h)
		if b.rootRanks[h]--; b.rootRanks[h] <= 0 {
			delete(b.rootRanks, h)
		}
	}
}

func (b *loadBoard) dropRoots(e *boardEntry) {
	for h := range e.roots {
		b.removeRoot(e, h)
	}
}

// held reports whether any rank holds root.
func (b *loadBoard) held(root uint64) bool { return b.rootRanks[root] > 0 }

// apply takes a rank's publication, arrived at atUnixNano.
func (b *loadBoard) apply(m *messages.RankLoad, atUnixNano int64) {
	e := b.ranks[rankOf(m.Worker)]
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
func (b *loadBoard) sent(w kv.WorkerWithDpRank) (*boardEntry, uint64) {
	e := b.ranks[w]
	if e == nil {
		return nil, 0
	}
	e.sent++
	b.unseen++
	return e, e.sent
}

// sharesPrefix reports whether a prompt whose first sampled sequence
// hash is root shares active blocks with e's rank (sequence.Roots).
func (e *boardEntry) sharesPrefix(root uint64) bool {
	if e == nil {
		return false
	}
	_, ok := e.roots[root]
	return ok
}

// applied is how many of this scheduler's adds to w its published load
// includes.
func (b *loadBoard) applied(w kv.WorkerWithDpRank) uint64 {
	if e := b.ranks[w]; e != nil {
		return e.applied
	}
	return 0
}

// fill sets c's load from its rank's publication (e), for a prompt that
// shares no active block with it (NewBlocks is the whole prompt). A rank
// that has published nothing yet is idle.
func (e *boardEntry) fill(c *scheduling.Candidate, promptBlocks uint64, nowUnixNano int64) {
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

// signals are a decision's signal sources and times for its route
// receipt (decide.Signals): built only when a receipt is asked for.
type signals struct {
	p *pending
	b *loadBoard
}

func (g signals) Load(w kv.WorkerWithDpRank) (string, int64) {
	if l := g.p.loads[w]; l != nil {
		return "reply", g.p.scored.UnixNano()
	}
	if e := g.b.ranks[w]; e != nil && e.load != nil {
		return "published", e.loadAt
	}
	return "none", 0
}

// OverlapAt is when the overlaps were asked for: the shards answered
// between it and the decision.
func (g signals) OverlapAt() int64 { return g.p.hashed.UnixNano() }
