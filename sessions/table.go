package sessions

import (
	"container/heap"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/kv"
)

// Defaults of Config.
const (
	DefaultTTL         = 5 * time.Minute
	DefaultMaxSessions = 100_000
	DefaultMaxIDBytes  = 256
)

// Errors of CheckID (wrapped in ErrBadID).
var (
	ErrBadID = errors.New("bad session id")
)

// Config bounds a Table.
type Config struct {
	// TTL is how long a session lives after its last use (and how long
	// an ended session's tombstone is kept). Must be positive.
	TTL time.Duration
	// MaxSessions bounds the entries (tombstones included); beyond it
	// the least recently used entry is evicted.
	MaxSessions int
	// MaxIDBytes bounds a session id's length.
	MaxIDBytes int
	// ReplicaID is the writer of this table's own versions.
	ReplicaID string
	// RefreshEvery is how stale the last announced use of a session may
	// get before a use is announced to peers again (Record returns
	// Refreshed), so that peers do not expire a session in use here.
	// 0: TTL/8.
	RefreshEvery time.Duration
}

// Validate reports bounds a Table cannot run with (New also needs a
// ReplicaID, which a replica may only learn at start).
func (c Config) Validate() error {
	switch {
	case c.TTL <= 0:
		return fmt.Errorf("sessions: TTL must be positive, got %s", c.TTL)
	case c.MaxSessions <= 0:
		return fmt.Errorf("sessions: MaxSessions must be positive, got %d", c.MaxSessions)
	case c.MaxIDBytes <= 0:
		return fmt.Errorf("sessions: MaxIDBytes must be positive, got %d", c.MaxIDBytes)
	case c.RefreshEvery < 0:
		return fmt.Errorf("sessions: RefreshEvery must not be negative, got %s", c.RefreshEvery)
	}
	return nil
}

// Version orders the writes of one session across replicas: the newer
// Stamp wins, equal stamps are broken by the larger Writer.
type Version struct {
	Stamp  int64 // writer's clock, unix nanoseconds, above the version it replaced
	Writer string
}

// Newer reports whether v wins over o.
func (v Version) Newer(o Version) bool {
	if v.Stamp != o.Stamp {
		return v.Stamp > o.Stamp
	}
	return v.Writer > o.Writer
}

// Entry is one session as the table holds and replicas exchange it.
type Entry struct {
	ID      string
	Worker  kv.WorkerWithDpRank
	Version Version
	// Ended marks a tombstone: the session was ended explicitly and its
	// id routes normally again; the tombstone only outranks older binds.
	Ended bool
	// LastUsed is the session's last use, unix nanoseconds: it expires
	// TTL after it. Not part of the version: uses only extend a binding.
	LastUsed int64
}

// Outcome is what Record did.
type Outcome uint8

const (
	// Kept: the session stayed on its rank; nothing to tell peers.
	Kept Outcome = iota
	// Refreshed: the session stayed on its rank, and its use should be
	// announced to peers (RefreshEvery passed since the last one).
	Refreshed
	// Bound: a new session (or one that had ended or expired) was bound.
	Bound
	// Moved: a live session was bound to another rank.
	Moved
)

// Stats counts what the table dropped.
type Stats struct {
	Evicted uint64 // entries dropped to stay within MaxSessions
	Expired uint64 // entries dropped TTL after their last use
}

type item struct {
	Entry
	announced int64 // last use announced to peers (LastUsed when written)
	idx       int   // position in the heap
}

// Table is the session table. Not safe for concurrent use: one actor owns
// it.
type Table struct {
	cfg     Config
	refresh int64
	byID    map[string]*item
	lru     lruHeap // min-heap by LastUsed: expiry and eviction order
	digest  Digest
	stats   Stats
}

// New builds a table; cfg must pass Validate.
func New(cfg Config) (*Table, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ReplicaID == "" {
		return nil, errors.New("sessions: ReplicaID must be set")
	}
	refresh := cfg.RefreshEvery
	if refresh == 0 {
		refresh = cfg.TTL / 8
	}
	return &Table{cfg: cfg, refresh: int64(refresh), byID: map[string]*item{}}, nil
}

// Config returns the table's configuration.
func (t *Table) Config() Config { return t.cfg }

// CheckID refuses ids a client must not be able to store: empty, longer
// than MaxIDBytes, not UTF-8, or holding control characters (they end up
// in logs and headers).
func (t *Table) CheckID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrBadID)
	case len(id) > t.cfg.MaxIDBytes:
		return fmt.Errorf("%w: %d bytes, at most %d allowed", ErrBadID, len(id), t.cfg.MaxIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: not UTF-8", ErrBadID)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: control character %U", ErrBadID, r)
		}
	}
	return nil
}

func (t *Table) expired(it *item, now int64) bool { return now-it.LastUsed >= int64(t.cfg.TTL) }

// Lookup returns the live binding of a session: not ended, not expired.
func (t *Table) Lookup(id string, now time.Time) (Entry, bool) {
	it := t.byID[id]
	if it == nil || it.Ended || t.expired(it, now.UnixNano()) {
		return Entry{}, false
	}
	return it.Entry, true
}

// Record notes that a request of session id was routed to w at now: it
// binds a new session, moves a live one bound elsewhere, or extends a
// live one's life. The returned entry is the session as it is now (what
// to gossip for Refreshed, Bound and Moved).
func (t *Table) Record(id string, w kv.WorkerWithDpRank, now time.Time) (Entry, Outcome) {
	n := now.UnixNano()
	it := t.byID[id]
	if it != nil && !it.Ended && !t.expired(it, n) && it.Worker == w {
		t.touch(it, n)
		if n-it.announced < t.refresh {
			return it.Entry, Kept
		}
		it.announced = n
		return it.Entry, Refreshed
	}
	out := Bound
	if it != nil && !it.Ended && !t.expired(it, n) {
		out = Moved
	}
	e := Entry{ID: id, Worker: w, Version: t.nextVersion(it, n), LastUsed: n}
	t.put(e, n, false)
	return e, out
}

// End ends a live session (a tombstone replaces it). It reports false
// when the session is unknown, ended or expired.
func (t *Table) End(id string, now time.Time) (Entry, bool) {
	n := now.UnixNano()
	it := t.byID[id]
	if it == nil || it.Ended || t.expired(it, n) {
		return Entry{}, false
	}
	e := Entry{ID: id, Worker: it.Worker, Version: t.nextVersion(it, n), Ended: true, LastUsed: max(n, it.LastUsed)}
	t.put(e, n, false)
	return e, true
}

// nextVersion is a version of this writer above the entry it replaces,
// even when the clocks of the replicas that wrote it disagree.
func (t *Table) nextVersion(prev *item, now int64) Version {
	stamp := now
	if prev != nil && prev.Version.Stamp >= stamp {
		stamp = prev.Version.Stamp + 1
	}
	return Version{Stamp: stamp, Writer: t.cfg.ReplicaID}
}

// Apply merges a peer's entry (a gossiped write or one of a snapshot's
// entries): a newer version replaces what is held, the same version only
// extends the last use, an older one changes nothing. An entry already
// expired at now is ignored; a last use after now counts as now; a
// version stamped more than a TTL in the future is refused. It reports whether anything changed, or an
// error for an entry no replica could have written.
func (t *Table) Apply(e Entry, now time.Time) (bool, error) {
	if err := t.CheckID(e.ID); err != nil {
		return false, err
	}
	if e.Version.Writer == "" || e.Version.Stamp <= 0 {
		return false, fmt.Errorf("sessions: entry %q has no version", e.ID)
	}
	n := now.UnixNano()
	if e.Version.Stamp > n+int64(t.cfg.TTL) {
		// A clock a whole TTL ahead (or a forged stamp) would win every
		// conflict for that long, and a stamp near the end of time could
		// never be outranked.
		return false, fmt.Errorf("sessions: entry %q is versioned %s in the future", e.ID, time.Duration(e.Version.Stamp-n))
	}
	if n-e.LastUsed >= int64(t.cfg.TTL) {
		return false, nil
	}
	// A use in our future (a peer's clock ahead, or a peer lying) counts
	// as now: no entry outlives its TTL on this replica's clock.
	e.LastUsed = min(e.LastUsed, n)
	it := t.byID[e.ID]
	switch {
	case it == nil || e.Version.Newer(it.Version):
		if it != nil {
			e.LastUsed = max(e.LastUsed, it.LastUsed)
		}
		return t.put(e, e.LastUsed, true), nil
	case e.Version == it.Version && e.LastUsed > it.LastUsed:
		t.touch(it, e.LastUsed)
		it.announced = max(it.announced, e.LastUsed) // a peer announced it already
		return true, nil
	}
	return false, nil
}

// put stores e (a new version), announced as of announced. In a full
// table a new entry evicts the least recently used one, unless it is a
// peer's entry less recently used itself: then it is the one left out (a
// local write always goes in, whatever the peers' clocks say). put
// reports whether e is stored.
func (t *Table) put(e Entry, announced int64, fromPeer bool) bool {
	if it := t.byID[e.ID]; it != nil {
		t.digest.remove(it.Entry)
		it.Entry = e
		it.announced = announced
		heap.Fix(&t.lru, it.idx)
		t.digest.add(e)
		return true
	}
	if len(t.byID) >= t.cfg.MaxSessions {
		t.stats.Evicted++
		if fromPeer && e.LastUsed < t.lru[0].LastUsed {
			return false
		}
		t.drop(t.lru[0])
	}
	it := &item{Entry: e, announced: announced}
	t.byID[e.ID] = it
	heap.Push(&t.lru, it)
	t.digest.add(e)
	return true
}

func (t *Table) touch(it *item, n int64) {
	if n > it.LastUsed {
		it.LastUsed = n
		heap.Fix(&t.lru, it.idx)
	}
}

func (t *Table) drop(it *item) {
	heap.Remove(&t.lru, it.idx)
	delete(t.byID, it.ID)
	t.digest.remove(it.Entry)
}

// Expire drops the entries whose TTL passed, oldest first, and returns
// how many.
func (t *Table) Expire(now time.Time) int {
	n := now.UnixNano()
	dropped := 0
	for len(t.lru) > 0 && t.expired(t.lru[0], n) {
		t.drop(t.lru[0])
		dropped++
	}
	t.stats.Expired += uint64(dropped)
	return dropped
}

// Snapshot lists every entry not expired at now, tombstones included, in
// no particular order (the owner's goroutine pays only for the copy; a
// sender that must truncate sorts by LastUsed itself).
func (t *Table) Snapshot(now time.Time) []Entry {
	n := now.UnixNano()
	out := make([]Entry, 0, len(t.byID))
	for _, it := range t.byID {
		if !t.expired(it, n) {
			out = append(out, it.Entry)
		}
	}
	return out
}

// Len is the number of entries, tombstones and not yet expired ones
// included.
func (t *Table) Len() int { return len(t.byID) }

// Digest summarises the entries (see Digest).
func (t *Table) Digest() Digest { return t.digest }

// Stats returns the drop counters.
func (t *Table) Stats() Stats { return t.stats }
