package sequence

import (
	"errors"
	"testing"
)

func TestTakeOver(t *testing.T) {
	r := func(origin string, hs ...uint64) Request {
		return Request{ID: "x", Origin: origin, SequenceHashes: hashes(hs...), ISL: 32, PrefillTokens: 32, TrackPrefill: true}
	}
	tests := []struct {
		name       string
		held, next Request
		wantTook   bool
		wantErr    error
		wantOrigin string
	}{
		{"a dead peer's record is replaced by the replica that decided again", r("dead", 1, 2), r("b", 1, 3), true, nil, "b"},
		{"this replica's own decision is never replaced by a peer", r("self", 1, 2), r("b", 1, 3), false, ErrDuplicateRequest, "self"},
		{"the same origin twice is a duplicate", r("b", 1, 2), r("b", 1, 3), false, ErrDuplicateRequest, "b"},
		{"this replica takes over a peer's record", r("dead", 1, 2), r("self", 1, 3), true, nil, "self"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(DefaultConfig())
			mustAdd(t, s, tt.held)
			took, err := s.TakeOver(tt.next, t0, "self")
			if took != tt.wantTook || !errors.Is(err, tt.wantErr) {
				t.Fatalf("took %v err %v, want %v %v", took, err, tt.wantTook, tt.wantErr)
			}
			reqs := s.Requests()
			if len(reqs) != 1 || reqs[0].Origin != tt.wantOrigin {
				t.Fatalf("requests %+v, want one of origin %q", reqs, tt.wantOrigin)
			}
			want := New(DefaultConfig())
			kept := tt.held
			if tt.wantTook {
				kept = tt.next
			}
			mustAdd(t, want, kept)
			if got, w := s.Load(), want.Load(); got != w {
				t.Fatalf("load %+v, want %+v (counted once)", got, w)
			}
		})
	}
}

func TestFreeFrom(t *testing.T) {
	s := New(DefaultConfig())
	mustAdd(t, s, Request{ID: "x", Origin: "b", SequenceHashes: hashes(1), ISL: 16})
	if err := s.FreeFrom("x", "dead"); !errors.Is(err, ErrOtherOrigin) {
		t.Fatalf("release by another origin: %v, want ErrOtherOrigin", err)
	}
	if !s.Has("x") {
		t.Fatal("a release by another origin freed the request")
	}
	if err := s.FreeFrom("x", "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.FreeFrom("x", "b"); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("second release: %v, want ErrUnknownRequest", err)
	}
	if s.Load() != (Load{}) {
		t.Fatalf("load after release %+v", s.Load())
	}
}
