package redial

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: time.Second, StableAfter: time.Minute}
	for _, tc := range []struct {
		n        int
		rnd      float64
		min, max time.Duration
	}{
		{1, 0, 50 * time.Millisecond, 50 * time.Millisecond},
		{1, 0.999, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 0, 100 * time.Millisecond, 100 * time.Millisecond},
		{3, 0.5, 200 * time.Millisecond, 400 * time.Millisecond},
		{4, 0.999, 400 * time.Millisecond, 800 * time.Millisecond},
		{5, 0.999, 500 * time.Millisecond, time.Second}, // capped at Max
		{1000, 0, 500 * time.Millisecond, 500 * time.Millisecond},
	} {
		d := p.Delay(tc.n, tc.rnd)
		if d < tc.min || d > tc.max {
			t.Errorf("Delay(%d, %v) = %v, want in [%v, %v]", tc.n, tc.rnd, d, tc.min, tc.max)
		}
	}
}

// TestBackoff: failures in a row grow the wait; a connection that lived
// past StableAfter starts it over; a short one is one more failure.
func TestBackoff(t *testing.T) {
	w := &Waits{}
	b := &Backoff{Policy: Policy{Base: 100 * time.Millisecond, Max: time.Second, StableAfter: 10 * time.Second},
		Rand: func() float64 { return 0 }, Waits: w}
	want := []time.Duration{50, 100, 200, 400, 500, 500}
	for i, ms := range want {
		if d := b.Failed(); d != ms*time.Millisecond {
			t.Fatalf("failure %d: wait %v, want %v", i+1, d, ms*time.Millisecond)
		}
	}
	if w.Max() != 500*time.Millisecond || w.Waiting() != 1 {
		t.Fatalf("waits: max %v waiting %d", w.Max(), w.Waiting())
	}
	b.Connected()
	if w.Max() != 0 || w.Waiting() != 0 {
		t.Fatalf("connected: max %v waiting %d", w.Max(), w.Waiting())
	}
	if d := b.Dropped(time.Second); d != 500*time.Millisecond {
		t.Errorf("short-lived connection: wait %v, want the grown 500ms", d)
	}
	if d := b.Dropped(time.Minute); d != 50*time.Millisecond {
		t.Errorf("long-lived connection: wait %v, want Base/2 again", d)
	}
	b.Close()
	if w.Max() != 0 {
		t.Errorf("closed endpoint still reported")
	}
}

// TestLimiter: a burst passes at once, then attempts are spaced at the
// rate (read on a fake clock).
func TestLimiter(t *testing.T) {
	now := time.Unix(0, 0)
	l := NewLimiter(10, 3, func() time.Time { return now })
	for i := range 3 {
		if d := l.Reserve(); d != 0 {
			t.Fatalf("burst attempt %d waits %v", i, d)
		}
	}
	if d := l.Reserve(); d != 100*time.Millisecond {
		t.Fatalf("4th attempt waits %v, want 100ms", d)
	}
	if d := l.Reserve(); d != 200*time.Millisecond {
		t.Fatalf("5th attempt waits %v, want 200ms (queued behind the 4th)", d)
	}
	now = now.Add(time.Second) // refills 10, capped at the burst of 3, minus the 2 owed
	if d := l.Reserve(); d != 0 {
		t.Fatalf("after a second: waits %v", d)
	}
	var nilLimiter *Limiter
	if nilLimiter.Reserve() != 0 || NewLimiter(0, 1, nil).Reserve() != 0 {
		t.Error("a nil or zero-rate limiter waits")
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Policy{{}, {Base: time.Second, Max: time.Millisecond, StableAfter: time.Second}, {Base: time.Second, Max: time.Second}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}
