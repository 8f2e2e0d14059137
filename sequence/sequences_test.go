package sequence

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func hashes(hs ...uint64) []kv.SequenceHash {
	out := make([]kv.SequenceHash, len(hs))
	for i, h := range hs {
		out[i] = kv.SequenceHash(h)
	}
	return out
}

func mustAdd(t *testing.T, s *ActiveSequences, r Request) {
	t.Helper()
	if err := s.AddRequest(r, t0); err != nil {
		t.Fatalf("AddRequest(%q): %v", r.ID, err)
	}
}

func TestActiveBlocksDedup(t *testing.T) {
	tests := []struct {
		name       string
		reuse      bool
		requests   []Request
		probe      []kv.SequenceHash
		wantBlocks float64
		wantNew    uint64
		free       []string
		wantAfter  float64
	}{
		{
			name:  "shared prefix counted once",
			reuse: true,
			requests: []Request{
				{ID: "a", SequenceHashes: hashes(1, 2, 3)},
				{ID: "b", SequenceHashes: hashes(1, 2, 4)},
			},
			probe:      hashes(1, 2, 5),
			wantBlocks: 4,
			wantNew:    1,
			free:       []string{"a"},
			wantAfter:  3, // 1, 2 still held by b
		},
		{
			name:  "identical prompts",
			reuse: true,
			requests: []Request{
				{ID: "a", SequenceHashes: hashes(7, 8)},
				{ID: "b", SequenceHashes: hashes(7, 8)},
				{ID: "c", SequenceHashes: hashes(7, 8)},
			},
			probe:      hashes(7, 8),
			wantBlocks: 2,
			wantNew:    0,
			free:       []string{"a", "b"},
			wantAfter:  2,
		},
		{
			name:  "no reuse counts every block",
			reuse: false,
			requests: []Request{
				{ID: "a", SequenceHashes: hashes(1, 2, 3)},
				{ID: "b", SequenceHashes: hashes(1, 2, 4)},
			},
			probe:      hashes(1, 2),
			wantBlocks: 6,
			wantNew:    2,
			free:       []string{"a"},
			wantAfter:  3,
		},
		{
			name:  "everything freed",
			reuse: true,
			requests: []Request{
				{ID: "a", SequenceHashes: hashes(1, 2)},
				{ID: "b", SequenceHashes: hashes(3)},
			},
			probe:      hashes(3, 9),
			wantBlocks: 3,
			wantNew:    1,
			free:       []string{"a", "b"},
			wantAfter:  0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.AssumeKVReuse = tt.reuse
			s := New(cfg)
			for _, r := range tt.requests {
				mustAdd(t, s, r)
			}
			if got := s.Load().ActiveBlocks; got != tt.wantBlocks {
				t.Errorf("ActiveBlocks = %v, want %v", got, tt.wantBlocks)
			}
			if got := s.NewBlocks(tt.probe, uint64(len(tt.probe))); got != tt.wantNew {
				t.Errorf("NewBlocks = %d, want %d", got, tt.wantNew)
			}
			for _, id := range tt.free {
				if err := s.Free(id); err != nil {
					t.Fatalf("Free(%q): %v", id, err)
				}
			}
			load := s.Load()
			if load.ActiveBlocks != tt.wantAfter {
				t.Errorf("after free ActiveBlocks = %v, want %v", load.ActiveBlocks, tt.wantAfter)
			}
			if want := len(tt.requests) - len(tt.free); load.ActiveRequests != want {
				t.Errorf("ActiveRequests = %d, want %d", load.ActiveRequests, want)
			}
		})
	}
}

func TestPrefillAccounting(t *testing.T) {
	s := New(DefaultConfig())
	mustAdd(t, s, Request{ID: "a", ISL: 128, PrefillTokens: 100, TrackPrefill: true})
	mustAdd(t, s, Request{ID: "b", ISL: 64, PrefillTokens: 50, TrackPrefill: true})
	mustAdd(t, s, Request{ID: "c", ISL: 80, PrefillTokens: 70, TrackPrefill: false})

	steps := []struct {
		name string
		op   func() error
		want uint64
	}{
		{"initial: untracked c is not counted", func() error { return nil }, 150},
		{"a prefilled", func() error { return s.MarkPrefillCompleted("a") }, 50},
		{"a marked again is a no-op", func() error { return s.MarkPrefillCompleted("a") }, 50},
		{"a freed after prefill", func() error { return s.Free("a") }, 50},
		{"b freed during prefill", func() error { return s.Free("b") }, 0},
		{"c freed", func() error { return s.Free("c") }, 0},
	}
	for _, st := range steps {
		if err := st.op(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := s.Load().ActivePrefillTokens; got != st.want {
			t.Fatalf("%s: ActivePrefillTokens = %d, want %d", st.name, got, st.want)
		}
	}
}

func TestErrors(t *testing.T) {
	s := New(DefaultConfig())
	mustAdd(t, s, Request{ID: "a", SequenceHashes: hashes(1, 2), ISL: 32, PrefillTokens: 32, TrackPrefill: true})
	before := s.Load()

	tests := []struct {
		name string
		op   func() error
		want error
	}{
		{"duplicate add", func() error {
			return s.AddRequest(Request{ID: "a", SequenceHashes: hashes(9), ISL: 16, PrefillTokens: 16, TrackPrefill: true}, t0)
		}, ErrDuplicateRequest},
		{"empty id", func() error { return s.AddRequest(Request{}, t0) }, ErrInvalidRequest},
		{"prefill beyond isl", func() error {
			return s.AddRequest(Request{ID: "x", ISL: 10, PrefillTokens: 11}, t0)
		}, ErrInvalidRequest},
		{"free unknown", func() error { return s.Free("nope") }, ErrUnknownRequest},
		{"mark unknown", func() error { return s.MarkPrefillCompleted("nope") }, ErrUnknownRequest},
		{"output tracking off", func() error { return s.AddOutputBlock("a", 1) }, ErrOutputTrackingDisabled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.op(); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if got := s.Load(); got != before {
				t.Fatalf("state changed: %+v, want %+v", got, before)
			}
			if s.Has("x") {
				t.Fatal("rejected request was recorded")
			}
		})
	}

	if err := s.Free("a"); err != nil {
		t.Fatalf("first free: %v", err)
	}
	if err := s.Free("a"); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("second free err = %v, want ErrUnknownRequest", err)
	}
	if got := s.Load(); got != (Load{}) {
		t.Fatalf("load after frees = %+v, want zero", got)
	}
}

func TestExpireStale(t *testing.T) {
	s := New(Config{AssumeKVReuse: true, ExpiryDuration: time.Hour})
	add := func(id string, at time.Time, hs ...uint64) {
		if err := s.AddRequest(Request{ID: id, SequenceHashes: hashes(hs...), ISL: 16, PrefillTokens: 16, TrackPrefill: true}, at); err != nil {
			t.Fatal(err)
		}
	}
	add("old", t0, 1, 2)
	add("older", t0.Add(-time.Minute), 1, 3)
	add("young", t0.Add(30*time.Minute), 1, 4)

	tests := []struct {
		now       time.Time
		want      []string
		remaining int
		blocks    float64
	}{
		{t0.Add(time.Hour - time.Minute), nil, 3, 4},   // "older" exactly at the limit stays
		{t0.Add(time.Hour), []string{"older"}, 2, 3},   // strictly older than an hour
		{t0.Add(time.Hour + 1), []string{"old"}, 1, 2}, // hashes 1 and 4 remain
		{t0.Add(2 * time.Hour), []string{"young"}, 0, 0},
	}
	for i, tt := range tests {
		got := s.ExpireStale(tt.now)
		if !reflect.DeepEqual(got, tt.want) {
			t.Fatalf("step %d: expired %v, want %v", i, got, tt.want)
		}
		load := s.Load()
		if load.ActiveRequests != tt.remaining || load.ActiveBlocks != tt.blocks {
			t.Fatalf("step %d: load %+v, want %d requests %v blocks", i, load, tt.remaining, tt.blocks)
		}
	}
	if load := s.Load(); load.ActivePrefillTokens != 0 {
		t.Fatalf("expired requests left prefill load %d", load.ActivePrefillTokens)
	}
}

func TestFreeOrigin(t *testing.T) {
	s := New(DefaultConfig())
	mustAdd(t, s, Request{ID: "l1", SequenceHashes: hashes(1, 2), ISL: 32, PrefillTokens: 10, TrackPrefill: true})
	mustAdd(t, s, Request{ID: "p2", Origin: "peer", SequenceHashes: hashes(1, 3), ISL: 32, PrefillTokens: 20, TrackPrefill: true})
	mustAdd(t, s, Request{ID: "p1", Origin: "peer", SequenceHashes: hashes(1, 2, 5), ISL: 48, PrefillTokens: 30, TrackPrefill: true})
	mustAdd(t, s, Request{ID: "o1", Origin: "other", SequenceHashes: hashes(9), ISL: 16, PrefillTokens: 5, TrackPrefill: true})

	if got := s.FreeOrigin("peer"); !reflect.DeepEqual(got, []string{"p1", "p2"}) {
		t.Fatalf("FreeOrigin(peer) = %v", got)
	}
	want := Load{ActivePrefillTokens: 15, ActiveBlocks: 3, ActiveRequests: 2}
	if got := s.Load(); got != want {
		t.Fatalf("load = %+v, want %+v", got, want)
	}
	if got := s.FreeOrigin("peer"); got != nil {
		t.Fatalf("second FreeOrigin(peer) = %v, want nil", got)
	}
	if !s.Has("l1") || !s.Has("o1") || s.Has("p1") {
		t.Fatal("FreeOrigin touched the wrong requests")
	}
}

func TestRequestsRestoreRoundTrip(t *testing.T) {
	src := New(DefaultConfig())
	mustAdd(t, src, Request{ID: "b", Origin: "peer", SequenceHashes: hashes(1, 2, 3), ISL: 48, PrefillTokens: 40, TrackPrefill: true, ExpectedOutputTokens: 99})
	if err := src.AddRequest(Request{ID: "a", SequenceHashes: hashes(1, 2), ISL: 32, PrefillTokens: 32, TrackPrefill: true}, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := src.MarkPrefillCompleted("a"); err != nil {
		t.Fatal(err)
	}

	infos := src.Requests()
	if len(infos) != 2 || infos[0].ID != "a" || infos[1].ID != "b" {
		t.Fatalf("Requests() not sorted by id: %+v", infos)
	}
	if a := infos[0]; !a.PrefillDone || a.PrefillTokens != 0 || !a.StartedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("info a = %+v", a)
	}
	if b := infos[1]; b.PrefillDone || b.PrefillTokens != 40 || b.Origin != "peer" || b.ExpectedOutputTokens != 99 {
		t.Fatalf("info b = %+v", b)
	}
	infos[1].SequenceHashes[0] = 777 // the snapshot is a copy
	if src.NewBlocks(hashes(1), 1) != 0 {
		t.Fatal("mutating a snapshot changed the tracker")
	}
	infos[1].SequenceHashes[0] = 1

	dst := New(DefaultConfig())
	for _, info := range infos {
		if err := dst.Restore(info); err != nil {
			t.Fatalf("Restore(%q): %v", info.ID, err)
		}
	}
	if dst.Load() != src.Load() {
		t.Fatalf("restored load %+v, want %+v", dst.Load(), src.Load())
	}
	if !reflect.DeepEqual(dst.Requests(), src.Requests()) {
		t.Fatalf("restored requests differ:\n%+v\n%+v", dst.Requests(), src.Requests())
	}
	if err := dst.Restore(infos[0]); !errors.Is(err, ErrDuplicateRequest) {
		t.Fatalf("duplicate restore err = %v", err)
	}
}

// TestMatchesNaiveReference drives random operations and checks the O(1)
// load against a recount from scratch after every step.
func TestMatchesNaiveReference(t *testing.T) {
	for _, reuse := range []bool{true, false} {
		cfg := DefaultConfig()
		cfg.AssumeKVReuse = reuse
		s := New(cfg)
		rng := rand.New(rand.NewPCG(1, uint64(len(t.Name()))))
		live := map[string]Request{}
		done := map[string]bool{}
		next := 0
		for step := range 3000 {
			switch op := rng.IntN(10); {
			case op < 5 || len(live) == 0:
				id := fmt.Sprintf("r%d", next)
				next++
				n := 1 + rng.IntN(8)
				// A chain as sequence hashes are: each names its whole
				// prefix. Few choices per block, so requests share
				// prefixes often and part at every depth.
				hs := make([]kv.SequenceHash, n)
				prev := uint64(0)
				for i := range hs {
					prev = (prev ^ uint64(1+rng.IntN(3))) * 0x9e3779b97f4a7c15
					hs[i] = kv.SequenceHash(prev)
				}
				r := Request{ID: id, SequenceHashes: hs, ISL: uint64(16 * n), PrefillTokens: uint64(rng.IntN(16*n + 1)), TrackPrefill: rng.IntN(2) == 0}
				if err := s.AddRequest(r, t0); err != nil {
					t.Fatal(err)
				}
				live[id] = r
			case op < 7:
				id := anyKey(live, rng)
				if err := s.MarkPrefillCompleted(id); err != nil {
					t.Fatal(err)
				}
				done[id] = true
			default:
				id := anyKey(live, rng)
				if err := s.Free(id); err != nil {
					t.Fatal(err)
				}
				delete(live, id)
				delete(done, id)
			}
			if got, want := s.Load(), naiveLoad(live, done, reuse); got != want {
				t.Fatalf("reuse=%v step %d: load %+v, want %+v", reuse, step, got, want)
			}
		}
	}
}

func anyKey(m map[string]Request, rng *rand.Rand) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Map order is random; sort for a reproducible pick.
	slices.Sort(keys)
	return keys[rng.IntN(len(keys))]
}

func naiveLoad(live map[string]Request, done map[string]bool, reuse bool) Load {
	var l Load
	unique := map[kv.SequenceHash]bool{}
	blocks := 0
	for id, r := range live {
		if r.TrackPrefill && !done[id] {
			l.ActivePrefillTokens += r.PrefillTokens
		}
		for _, h := range r.SequenceHashes {
			unique[h] = true
		}
		blocks += len(r.SequenceHashes)
	}
	if reuse {
		blocks = len(unique)
	}
	l.ActiveBlocks = float64(blocks)
	l.ActiveRequests = len(live)
	return l
}

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
