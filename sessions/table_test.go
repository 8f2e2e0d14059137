package sessions

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

var t0 = time.Unix(1_700_000_000, 0)

func rank(w uint64, r uint32) kv.WorkerWithDpRank {
	return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(w), DpRank: r}
}

func newTable(t testing.TB, replica string, max int) *Table {
	t.Helper()
	tb, err := New(Config{TTL: time.Minute, MaxSessions: max, MaxIDBytes: 64, ReplicaID: replica, RefreshEvery: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestRecordOutcomes(t *testing.T) {
	tb := newTable(t, "a", 10)
	steps := []struct {
		name   string
		at     time.Duration
		worker kv.WorkerWithDpRank
		want   Outcome
	}{
		{"first request binds", 0, rank(1, 0), Bound},
		{"same rank soon after is kept", time.Second, rank(1, 0), Kept},
		{"same rank after RefreshEvery is announced", 11 * time.Second, rank(1, 0), Refreshed},
		{"announced use resets the refresh clock", 12 * time.Second, rank(1, 0), Kept},
		{"another rank moves it", 13 * time.Second, rank(2, 1), Moved},
		{"moving back is a move too", 14 * time.Second, rank(1, 0), Moved},
		{"after the TTL it binds afresh", 14*time.Second + time.Minute, rank(3, 0), Bound},
	}
	for _, s := range steps {
		e, got := tb.Record("s", s.worker, t0.Add(s.at))
		if got != s.want {
			t.Fatalf("%s: outcome %d, want %d", s.name, got, s.want)
		}
		if e.Worker != s.worker || e.Ended {
			t.Fatalf("%s: entry %+v", s.name, e)
		}
		if l, ok := tb.Lookup("s", t0.Add(s.at)); !ok || l.Worker != s.worker {
			t.Fatalf("%s: lookup %+v %v", s.name, l, ok)
		}
	}
}

func TestTTLCountsFromLastUse(t *testing.T) {
	tb := newTable(t, "a", 10)
	tb.Record("s", rank(1, 0), t0)
	tb.Record("s", rank(1, 0), t0.Add(50*time.Second))
	if _, ok := tb.Lookup("s", t0.Add(109*time.Second)); !ok {
		t.Fatal("a session used 59 s ago expired with a 60 s TTL")
	}
	if _, ok := tb.Lookup("s", t0.Add(110*time.Second)); ok {
		t.Fatal("a session idle for the TTL is still bound")
	}
	if n := tb.Expire(t0.Add(109 * time.Second)); n != 0 {
		t.Fatalf("expired %d early", n)
	}
	if n := tb.Expire(t0.Add(110 * time.Second)); n != 1 || tb.Len() != 0 || tb.Stats().Expired != 1 {
		t.Fatalf("expired %d, len %d, stats %+v", n, tb.Len(), tb.Stats())
	}
	if tb.Digest() != (Digest{}) {
		t.Fatalf("empty table digest %+v", tb.Digest())
	}
}

func TestEnd(t *testing.T) {
	tb := newTable(t, "a", 10)
	if _, ok := tb.End("s", t0); ok {
		t.Fatal("ended an unknown session")
	}
	bound, _ := tb.Record("s", rank(1, 0), t0)
	e, ok := tb.End("s", t0.Add(time.Second))
	if !ok || !e.Ended || !e.Version.Newer(bound.Version) {
		t.Fatalf("end: %+v %v", e, ok)
	}
	if _, ok := tb.Lookup("s", t0.Add(time.Second)); ok {
		t.Fatal("an ended session is still bound")
	}
	if _, ok := tb.End("s", t0.Add(2*time.Second)); ok {
		t.Fatal("ended a session twice")
	}
	// A late gossip of the bind it ended cannot revive it.
	if changed, err := tb.Apply(bound, t0.Add(2*time.Second)); changed || err != nil {
		t.Fatalf("older bind applied over the tombstone: %v %v", changed, err)
	}
	// A new first request binds again, above the tombstone.
	e2, out := tb.Record("s", rank(2, 0), t0.Add(3*time.Second))
	if out != Bound || !e2.Version.Newer(e.Version) {
		t.Fatalf("rebinding after end: %d %+v", out, e2)
	}
}

func TestApplyLastWriterWins(t *testing.T) {
	mk := func(w uint64, stamp int64, writer string, ended bool) Entry {
		return Entry{ID: "s", Worker: rank(w, 0), Version: Version{Stamp: stamp, Writer: writer}, Ended: ended, LastUsed: t0.UnixNano() + stamp}
	}
	cases := []struct {
		name       string
		held, peer Entry
		changed    bool
		wantWorker uint64
	}{
		{"newer stamp wins", mk(1, 10, "b", false), mk(2, 11, "a", false), true, 2},
		{"older stamp loses", mk(1, 10, "a", false), mk(2, 9, "z", false), false, 1},
		{"equal stamps: larger writer wins", mk(1, 10, "a", false), mk(2, 10, "b", false), true, 2},
		{"equal stamps: smaller writer loses", mk(1, 10, "b", false), mk(2, 10, "a", false), false, 1},
		{"same version extends nothing if older use", mk(1, 10, "a", false), mk(1, 10, "a", false), false, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := newTable(t, "self", 10)
			now := t0.Add(time.Second)
			if _, err := tb.Apply(c.held, now); err != nil {
				t.Fatal(err)
			}
			changed, err := tb.Apply(c.peer, now)
			if err != nil || changed != c.changed {
				t.Fatalf("changed %v err %v, want %v", changed, err, c.changed)
			}
			got, _ := tb.Lookup("s", now)
			if uint64(got.Worker.WorkerID) != c.wantWorker {
				t.Fatalf("worker %d, want %d", got.Worker.WorkerID, c.wantWorker)
			}
		})
	}
}

func TestApplySameVersionExtendsUse(t *testing.T) {
	a, b := newTable(t, "a", 10), newTable(t, "b", 10)
	e, _ := a.Record("s", rank(1, 0), t0)
	b.Apply(e, t0)
	e2, out := a.Record("s", rank(1, 0), t0.Add(30*time.Second))
	if out != Refreshed {
		t.Fatalf("outcome %d", out)
	}
	if changed, _ := b.Apply(e2, t0.Add(30*time.Second)); !changed {
		t.Fatal("a refreshed use was not applied")
	}
	if _, ok := b.Lookup("s", t0.Add(80*time.Second)); !ok {
		t.Fatal("the peer expired a session its owner refreshed")
	}
	if a.Digest() != b.Digest() {
		t.Fatal("digests differ after the same writes")
	}
}

func TestApplyRefusesBadEntries(t *testing.T) {
	tb := newTable(t, "a", 10)
	for _, e := range []Entry{
		{ID: "", Version: Version{Stamp: 1, Writer: "b"}, LastUsed: t0.UnixNano()},
		{ID: strings.Repeat("x", 65), Version: Version{Stamp: 1, Writer: "b"}, LastUsed: t0.UnixNano()},
		{ID: "s", Version: Version{Stamp: 1}, LastUsed: t0.UnixNano()},
		{ID: "s", Version: Version{Writer: "b"}, LastUsed: t0.UnixNano()},
		{ID: "s", Version: Version{Stamp: 1<<63 - 1, Writer: "b"}, LastUsed: t0.UnixNano()},
		{ID: "s", Version: Version{Stamp: t0.Add(time.Minute + time.Second).UnixNano(), Writer: "b"}, LastUsed: t0.UnixNano()},
	} {
		if _, err := tb.Apply(e, t0); err == nil {
			t.Errorf("applied %+v", e)
		}
	}
	// Expired on arrival: ignored without error.
	old := Entry{ID: "s", Version: Version{Stamp: 1, Writer: "b"}, LastUsed: t0.Add(-time.Hour).UnixNano()}
	if changed, err := tb.Apply(old, t0); changed || err != nil || tb.Len() != 0 {
		t.Fatalf("expired entry: %v %v len %d", changed, err, tb.Len())
	}
}

func TestCheckID(t *testing.T) {
	tb := newTable(t, "a", 10)
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"conv-42", true},
		{"日本語-セッション", true},
		{strings.Repeat("x", 64), true},
		{"", false},
		{strings.Repeat("x", 65), false},
		{"bad\xffutf8", false},
		{"new\nline", false},
		{"nul\x00", false},
		{"del\x7f", false},
	} {
		err := tb.CheckID(c.id)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrBadID)) {
			t.Errorf("CheckID(%q) = %v, want ok=%v", c.id, err, c.ok)
		}
	}
}

// TestBoundedByLRU: an attacker's endless fresh ids keep the table at its
// cap, evicting the least recently used and counting it; a session in use
// survives.
func TestBoundedByLRU(t *testing.T) {
	tb := newTable(t, "a", 100)
	tb.Record("keep", rank(1, 0), t0)
	for i := range 1000 {
		now := t0.Add(time.Duration(i+1) * time.Millisecond)
		tb.Record(fmt.Sprintf("junk-%d", i), rank(2, 0), now)
		if i%10 == 0 {
			tb.Record("keep", rank(1, 0), now)
		}
		if tb.Len() > 100 {
			t.Fatalf("table grew to %d", tb.Len())
		}
	}
	if _, ok := tb.Lookup("keep", t0.Add(time.Second)); !ok {
		t.Fatal("a session in use was evicted")
	}
	if _, ok := tb.Lookup("junk-0", t0.Add(time.Second)); ok {
		t.Fatal("the least recently used session survived")
	}
	if got := tb.Stats().Evicted; got != 1001-100 {
		t.Fatalf("evicted %d, want %d", got, 1001-100)
	}
	if d := tb.Digest(); d.Count != 100 {
		t.Fatalf("digest count %d", d.Count)
	}
}

// TestFullTableKeepsTheRecent: in a full table a peer's entry older than
// every local one is the one left out, not a recent local session.
func TestFullTableKeepsTheRecent(t *testing.T) {
	tb := newTable(t, "a", 2)
	tb.Record("x", rank(1, 0), t0.Add(10*time.Second))
	tb.Record("y", rank(1, 0), t0.Add(11*time.Second))
	old := Entry{ID: "old", Worker: rank(2, 0), Version: Version{Stamp: 1, Writer: "b"}, LastUsed: t0.UnixNano()}
	if changed, err := tb.Apply(old, t0.Add(12*time.Second)); changed || err != nil {
		t.Fatalf("an older peer entry displaced a local one: %v %v", changed, err)
	}
	newer := Entry{ID: "newer", Worker: rank(2, 0), Version: Version{Stamp: 1, Writer: "b"}, LastUsed: t0.Add(12 * time.Second).UnixNano()}
	if changed, _ := tb.Apply(newer, t0.Add(12*time.Second)); !changed {
		t.Fatal("a more recent peer entry was left out")
	}
	_, okX := tb.Lookup("x", t0.Add(12*time.Second))
	_, okY := tb.Lookup("y", t0.Add(12*time.Second))
	if okX || !okY || tb.Len() != 2 || tb.Stats().Evicted != 2 {
		t.Fatalf("x %v y %v len %d stats %+v", okX, okY, tb.Len(), tb.Stats())
	}
	// A local bind goes in even when the peers' entries are stamped by a
	// clock ahead of ours.
	ahead := Entry{ID: "ahead", Worker: rank(2, 0), Version: Version{Stamp: 1, Writer: "b"}, LastUsed: t0.Add(time.Hour).UnixNano()}
	tb.Apply(ahead, t0.Add(12*time.Second))
	tb.Apply(Entry{ID: "ahead2", Worker: rank(2, 0), Version: Version{Stamp: 1, Writer: "b"}, LastUsed: t0.Add(time.Hour).UnixNano()}, t0.Add(12*time.Second))
	if _, out := tb.Record("local", rank(1, 0), t0.Add(13*time.Second)); out != Bound {
		t.Fatalf("outcome %d", out)
	}
	if _, ok := tb.Lookup("local", t0.Add(13*time.Second)); !ok {
		t.Fatal("a local bind was left out of a table full of entries from a clock ahead")
	}
}

// TestConvergence: replicas that apply the same writes in different orders
// hold the same table; a replica that missed some converges by merging a
// peer's snapshot.
func TestConvergence(t *testing.T) {
	a, b, c := newTable(t, "a", 50), newTable(t, "b", 50), newTable(t, "c", 50)
	var writes []Entry
	for i := range 40 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		id := fmt.Sprintf("s%d", i%15)
		w := a
		if i%3 == 1 {
			w = b
		}
		var e Entry
		if i%7 == 6 {
			var ok bool
			if e, ok = w.End(id, now); !ok {
				continue
			}
		} else {
			e, _ = w.Record(id, rank(uint64(i%4), 0), now)
		}
		writes = append(writes, e)
		// The other writer sees it at once, as gossip would.
		other := b
		if w == b {
			other = a
		}
		other.Apply(e, now)
	}
	now := t0.Add(time.Second)
	for i := len(writes) - 1; i >= 0; i-- { // c sees everything backwards
		c.Apply(writes[i], now)
	}
	if a.Digest() != b.Digest() || a.Digest() != c.Digest() {
		t.Fatalf("digests differ: %+v %+v %+v", a.Digest(), b.Digest(), c.Digest())
	}
	// A fresh replica merging a snapshot converges too.
	d := newTable(t, "d", 50)
	for _, e := range a.Snapshot(now) {
		d.Apply(e, now)
	}
	if d.Digest() != a.Digest() {
		t.Fatal("a merged snapshot does not converge")
	}
	for i := range 15 {
		id := fmt.Sprintf("s%d", i)
		ea, oka := a.Lookup(id, now)
		ed, okd := d.Lookup(id, now)
		if oka != okd || ea.Worker != ed.Worker {
			t.Fatalf("%s: %+v/%v vs %+v/%v", id, ea, oka, ed, okd)
		}
	}
}

// TestFutureUseCountsAsNow: a peer cannot keep an entry alive past the
// TTL on this replica's clock by stamping its use in the future.
func TestFutureUseCountsAsNow(t *testing.T) {
	tb := newTable(t, "a", 10)
	tb.Apply(Entry{ID: "s", Worker: rank(1, 0), Version: Version{Stamp: 1, Writer: "b"}, LastUsed: 1<<63 - 1}, t0)
	if _, ok := tb.Lookup("s", t0.Add(59*time.Second)); !ok {
		t.Fatal("entry missing within its TTL")
	}
	if n := tb.Expire(t0.Add(time.Minute)); n != 1 {
		t.Fatalf("expired %d, want the entry one TTL after it arrived", n)
	}
}

// TestVersionAboveSkewedClock: a write over an entry stamped by a replica
// whose clock runs ahead still wins.
func TestVersionAboveSkewedClock(t *testing.T) {
	tb := newTable(t, "a", 10)
	future := Entry{ID: "s", Worker: rank(1, 0), Version: Version{Stamp: t0.Add(30 * time.Second).UnixNano(), Writer: "z"}, LastUsed: t0.UnixNano()}
	tb.Apply(future, t0)
	e, out := tb.Record("s", rank(2, 0), t0.Add(time.Second))
	if out != Moved || !e.Version.Newer(future.Version) {
		t.Fatalf("move over a future stamp: %d %+v", out, e)
	}
}

func TestSnapshotLeavesOutExpired(t *testing.T) {
	tb := newTable(t, "a", 10)
	tb.Record("old", rank(1, 0), t0)
	tb.Record("new", rank(1, 0), t0.Add(2*time.Second))
	tb.Record("mid", rank(1, 0), t0.Add(time.Second))
	tb.Record("gone", rank(1, 0), t0.Add(-2*time.Minute))
	tb.End("mid", t0.Add(2*time.Second))
	var ids []string
	for _, e := range tb.Snapshot(t0.Add(3 * time.Second)) {
		ids = append(ids, e.ID)
	}
	slices.Sort(ids)
	if strings.Join(ids, ",") != "mid,new,old" {
		t.Fatalf("snapshot %v", ids)
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{TTL: time.Second, MaxSessions: 1, MaxIDBytes: 1, ReplicaID: "a"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.TTL = 0 },
		func(c *Config) { c.MaxSessions = 0 },
		func(c *Config) { c.MaxIDBytes = 0 },
		func(c *Config) { c.ReplicaID = "" },
		func(c *Config) { c.RefreshEvery = -1 },
	} {
		c := good
		bad(&c)
		if _, err := New(c); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

func TestStay(t *testing.T) {
	cases := []struct {
		b      BoundRank
		stay   bool
		reason MoveReason
	}{
		{BoundRank{Registered: true, Eligible: true}, true, ""},
		{BoundRank{Registered: false}, false, MoveGone},
		{BoundRank{Registered: true, State: kv.WorkerDraining, Eligible: true}, false, MoveGone},
		{BoundRank{Registered: true, State: kv.WorkerUnhealthy, Eligible: true}, false, MoveGone},
		{BoundRank{Registered: true, State: kv.WorkerBusy, Eligible: true}, false, MoveBusy},
		{BoundRank{Registered: true, Eligible: true, Overloaded: true}, false, MoveBusy},
		{BoundRank{Registered: true, Eligible: false}, false, MoveExcluded},
	}
	for _, c := range cases {
		stay, reason := Stay(c.b)
		if stay != c.stay || reason != c.reason {
			t.Errorf("Stay(%+v) = %v %q, want %v %q", c.b, stay, reason, c.stay, c.reason)
		}
	}
}
