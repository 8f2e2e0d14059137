package sequence

import (
	"fmt"
	"testing"
	"time"
)

// HeadPrefill is the oldest request still waiting for its prefill, in the
// order requests were added; PrefillPending times one request's prefill.
func TestHeadPrefill(t *testing.T) {
	s := New(DefaultConfig())
	if _, _, ok := s.HeadPrefill(); ok {
		t.Fatal("empty tracker has a head")
	}
	add := func(id string, prefill uint64, at time.Duration) {
		t.Helper()
		r := Request{ID: id, ISL: 100, PrefillTokens: prefill, TrackPrefill: true}
		if err := s.AddRequest(r, t0.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	head := func(wantTokens uint64, wantAt time.Duration, wantOK bool) {
		t.Helper()
		tokens, started, ok := s.HeadPrefill()
		if ok != wantOK || tokens != wantTokens || (ok && !started.Equal(t0.Add(wantAt))) {
			t.Fatalf("head (%d, %v, %v), want (%d, %v, %v)", tokens, started.Sub(t0), ok, wantTokens, wantAt, wantOK)
		}
	}
	add("cached", 0, 0) // nothing to prefill: never the head
	add("a", 40, time.Second)
	add("b", 60, 2*time.Second)
	add("c", 80, 3*time.Second)
	head(40, time.Second, true)
	if tokens, started, ok := s.PrefillPending("b"); !ok || tokens != 60 || !started.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("pending b: %d %v %v", tokens, started, ok)
	}
	if err := s.MarkPrefillCompleted("a"); err != nil {
		t.Fatal(err)
	}
	if tokens, _, ok := s.PrefillPending("a"); !ok || tokens != 0 {
		t.Fatalf("pending a after its prefill: %d %v", tokens, ok)
	}
	head(60, 2*time.Second, true)
	if err := s.Free("b"); err != nil {
		t.Fatal(err)
	}
	head(80, 3*time.Second, true)
	// An id freed and re-added is a new request at the back.
	if err := s.Free("c"); err != nil {
		t.Fatal(err)
	}
	add("d", 10, 4*time.Second)
	add("c", 20, 5*time.Second)
	head(10, 4*time.Second, true)
	if err := s.MarkPrefillCompleted("d"); err != nil {
		t.Fatal(err)
	}
	head(20, 5*time.Second, true)
	if err := s.MarkPrefillCompleted("c"); err != nil {
		t.Fatal(err)
	}
	head(0, 0, false)
	if _, _, ok := s.PrefillPending("nope"); ok {
		t.Fatal("unknown id pending")
	}
	// Untracked prefill never makes a head.
	if err := s.AddRequest(Request{ID: "u", ISL: 10, PrefillTokens: 10}, t0); err != nil {
		t.Fatal(err)
	}
	head(0, 0, false)
}

// Finished entries never outnumber the requests for long, even when no
// one asks for the head.
func TestPrefillOrderStaysBounded(t *testing.T) {
	s := New(DefaultConfig())
	if err := s.AddRequest(Request{ID: "stuck", ISL: 10, PrefillTokens: 10, TrackPrefill: true}, t0); err != nil {
		t.Fatal(err)
	}
	for i := range 10000 {
		id := fmt.Sprint(i)
		if err := s.AddRequest(Request{ID: id, ISL: 10, PrefillTokens: 10, TrackPrefill: true}, t0); err != nil {
			t.Fatal(err)
		}
		if err := s.Free(id); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.prefillOrder); n > 2*len(s.requests)+16 {
		t.Fatalf("%d entries for %d requests", n, len(s.requests))
	}
	if tokens, _, ok := s.HeadPrefill(); !ok || tokens != 10 {
		t.Fatalf("head %d %v", tokens, ok)
	}
}
