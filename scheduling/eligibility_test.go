package scheduling

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func r(worker uint64, dp uint32) kv.WorkerWithDpRank {
	return kv.WorkerWithDpRank{WorkerID: kv.WorkerID(worker), DpRank: dp}
}

func TestEligible(t *testing.T) {
	cands := []Candidate{
		{Worker: kv.WorkerWithDpRank{WorkerID: 1, DpRank: 0}},
		{Worker: kv.WorkerWithDpRank{WorkerID: 1, DpRank: 1}},
		{Worker: kv.WorkerWithDpRank{WorkerID: 2, DpRank: 0}},
		{Worker: kv.WorkerWithDpRank{WorkerID: 3, DpRank: 0}},
	}
	tests := []struct {
		name    string
		c       Constraints
		want    []kv.WorkerWithDpRank
		wantErr string
	}{
		{"unconstrained", Constraints{}, []kv.WorkerWithDpRank{r(1, 0), r(1, 1), r(2, 0), r(3, 0)}, ""},
		{"allowed keeps every rank of a worker", Constraints{AllowedWorkerIDs: []kv.WorkerID{1, 3}},
			[]kv.WorkerWithDpRank{r(1, 0), r(1, 1), r(3, 0)}, ""},
		{"pinned rank", Constraints{Pinned: &kv.WorkerWithDpRank{WorkerID: 1, DpRank: 1}},
			[]kv.WorkerWithDpRank{r(1, 1)}, ""},
		{"pinned and allowed", Constraints{Pinned: &kv.WorkerWithDpRank{WorkerID: 2}, AllowedWorkerIDs: []kv.WorkerID{2}},
			[]kv.WorkerWithDpRank{r(2, 0)}, ""},
		{"pinned missing", Constraints{Pinned: &kv.WorkerWithDpRank{WorkerID: 1, DpRank: 7}}, nil, "pinned worker 1/7 is not a registered candidate"},
		{"pinned not allowed", Constraints{Pinned: &kv.WorkerWithDpRank{WorkerID: 2}, AllowedWorkerIDs: []kv.WorkerID{3}}, nil, "not among the allowed workers"},
		{"allowed matches nothing", Constraints{AllowedWorkerIDs: []kv.WorkerID{42}}, nil, "none of 4 candidates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Eligible(cands, tt.c)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrNoEligibleWorker) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrNoEligibleWorker mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var workers []kv.WorkerWithDpRank
			for _, c := range got {
				workers = append(workers, c.Worker)
			}
			if !reflect.DeepEqual(workers, tt.want) {
				t.Fatalf("eligible %v, want %v", workers, tt.want)
			}
		})
	}
	if _, err := Eligible(nil, Constraints{}); !errors.Is(err, ErrNoEligibleWorker) {
		t.Fatalf("no candidates err = %v", err)
	}
}

func TestOverloaded(t *testing.T) {
	disabled := DefaultConfig()
	disabled.RouterQueueEnabled = false
	zero := DefaultConfig()
	zero.RouterQueueThreshold = 0
	tests := []struct {
		name   string
		cfg    Config
		c      Candidate
		budget uint64
		want   bool
	}{
		{"below threshold", DefaultConfig(), Candidate{ActivePrefillTokens: 16 * 8192, HasLoad: true}, 8192, false},
		{"above threshold", DefaultConfig(), Candidate{ActivePrefillTokens: 16*8192 + 1, HasLoad: true}, 8192, true},
		{"queueing disabled", disabled, Candidate{ActivePrefillTokens: 1 << 40, HasLoad: true}, 8192, false},
		{"unknown budget", DefaultConfig(), Candidate{ActivePrefillTokens: 1 << 40, HasLoad: true}, 0, false},
		{"unknown load", DefaultConfig(), Candidate{ActivePrefillTokens: 1 << 40}, 8192, false},
		{"threshold 0: any prefill", zero, Candidate{ActivePrefillTokens: 1, HasLoad: true}, 8192, true},
		{"threshold 0: idle", zero, Candidate{HasLoad: true}, 8192, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Overloaded(tt.cfg, tt.c, tt.budget); got != tt.want {
				t.Fatalf("Overloaded = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAllOverloaded(t *testing.T) {
	busy := func(id uint64) Candidate {
		return Candidate{Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(id)}, ActivePrefillTokens: 1 << 20, HasLoad: true}
	}
	budgets := map[kv.WorkerID]uint64{1: 1024, 2: 1024, 3: 1 << 20}
	cfg := DefaultConfig()
	tests := []struct {
		name  string
		cands []Candidate
		want  bool
	}{
		{"all busy", []Candidate{busy(1), busy(2)}, true},
		{"one with room", []Candidate{busy(1), busy(3)}, false},
		{"one without a budget", []Candidate{busy(1), busy(4)}, false},
		{"no candidates", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AllOverloaded(cfg, tt.cands, budgets); got != tt.want {
				t.Fatalf("AllOverloaded = %v, want %v", got, tt.want)
			}
		})
	}
}

// EligibleRanks applies the same rule to bare ranks (before the fan-out).
func TestEligibleRanksMatchesEligible(t *testing.T) {
	ranks := []kv.WorkerWithDpRank{r(1, 0), r(1, 1), r(2, 0)}
	cands := make([]Candidate, len(ranks))
	for i, w := range ranks {
		cands[i] = Candidate{Worker: w}
	}
	pinned := r(1, 1)
	missing := r(3, 0)
	for _, c := range []Constraints{
		{}, {AllowedWorkerIDs: []kv.WorkerID{2}}, {Pinned: &pinned}, {Pinned: &missing},
		{Pinned: &pinned, AllowedWorkerIDs: []kv.WorkerID{2}}, {AllowedWorkerIDs: []kv.WorkerID{9}},
	} {
		gotRanks, errRanks := EligibleRanks(ranks, c)
		gotCands, errCands := Eligible(cands, c)
		if (errRanks == nil) != (errCands == nil) || (errRanks != nil && errRanks.Error() != errCands.Error()) {
			t.Fatalf("%+v: errors differ: %v vs %v", c, errRanks, errCands)
		}
		if len(gotRanks) != len(gotCands) {
			t.Fatalf("%+v: %v vs %v", c, gotRanks, gotCands)
		}
		for i := range gotRanks {
			if gotRanks[i] != gotCands[i].Worker {
				t.Fatalf("%+v: %v vs %v", c, gotRanks, gotCands)
			}
		}
	}
	if _, err := EligibleRanks(nil, Constraints{}); !errors.Is(err, ErrNoEligibleWorker) || !strings.Contains(err.Error(), "no workers are registered") {
		t.Fatalf("empty registry: %v", err)
	}
}

func TestRoutable(t *testing.T) {
	tests := []struct {
		state        kv.WorkerState
		free, pinned bool
	}{
		{kv.WorkerActive, true, true},
		{kv.WorkerBusy, false, true},
		{kv.WorkerUnhealthy, false, false},
		{kv.WorkerDraining, false, false},
	}
	for _, tt := range tests {
		if got := Routable(tt.state, false); got != tt.free {
			t.Errorf("Routable(%v, unpinned) = %v, want %v", tt.state, got, tt.free)
		}
		if got := Routable(tt.state, true); got != tt.pinned {
			t.Errorf("Routable(%v, pinned) = %v, want %v", tt.state, got, tt.pinned)
		}
	}
}

// Ranks that are not routable are skipped; the error says why nothing is
// left, and a pinned rank may be busy but not unhealthy or draining.
func TestEligibleStates(t *testing.T) {
	ranks := []kv.WorkerWithDpRank{r(1, 0), r(1, 1), r(2, 0), r(3, 0), r(4, 0)}
	states := map[kv.WorkerWithDpRank]kv.WorkerState{
		r(1, 1): kv.WorkerBusy, r(2, 0): kv.WorkerUnhealthy, r(3, 0): kv.WorkerDraining,
	}
	stateOf := func(w kv.WorkerWithDpRank) kv.WorkerState { return states[w] }
	pin := func(w kv.WorkerWithDpRank) *kv.WorkerWithDpRank { return &w }
	tests := []struct {
		name    string
		c       Constraints
		want    []kv.WorkerWithDpRank
		wantErr string
	}{
		{"no states: all", Constraints{}, ranks, ""},
		{"active only", Constraints{State: stateOf}, []kv.WorkerWithDpRank{r(1, 0), r(4, 0)}, ""},
		{"allowed and states", Constraints{State: stateOf, AllowedWorkerIDs: []kv.WorkerID{1, 2}}, []kv.WorkerWithDpRank{r(1, 0)}, ""},
		{"nothing routable among the allowed", Constraints{State: stateOf, AllowedWorkerIDs: []kv.WorkerID{2, 3}},
			nil, "no routable worker rank: of 2 candidates, 1 unhealthy, 1 draining"},
		{"allowed matches nothing", Constraints{State: stateOf, AllowedWorkerIDs: []kv.WorkerID{9}}, nil, "none of 5 candidates"},
		{"pinned busy is routed", Constraints{State: stateOf, Pinned: pin(r(1, 1))}, []kv.WorkerWithDpRank{r(1, 1)}, ""},
		{"pinned unhealthy", Constraints{State: stateOf, Pinned: pin(r(2, 0))}, nil, "pinned worker 2/0 is unhealthy"},
		{"pinned draining", Constraints{State: stateOf, Pinned: pin(r(3, 0))}, nil, "pinned worker 3/0 is draining"},
		{"pinned missing", Constraints{State: stateOf, Pinned: pin(r(7, 0))}, nil, "not a registered candidate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EligibleRanks(ranks, tt.c)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrNoEligibleWorker) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrNoEligibleWorker mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("eligible %v (%v), want %v", got, err, tt.want)
			}
		})
	}
	all := map[kv.WorkerWithDpRank]kv.WorkerState{r(1, 0): kv.WorkerBusy, r(1, 1): kv.WorkerBusy}
	_, err := EligibleRanks(ranks[:2], Constraints{State: func(w kv.WorkerWithDpRank) kv.WorkerState { return all[w] }})
	if !errors.Is(err, ErrNoEligibleWorker) || !strings.Contains(err.Error(), "of 2 candidates, 2 busy") {
		t.Fatalf("every rank busy: %v", err)
	}
}
