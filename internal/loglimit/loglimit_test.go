package loglimit

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := Limiter{Every: time.Second}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{0, true, 0}, // the first line always goes through
		{100 * time.Millisecond, false, 0},
		{900 * time.Millisecond, false, 0},
		{time.Second, true, 2}, // and says what it stood for
		{1500 * time.Millisecond, false, 0},
		{5 * time.Second, true, 1},
		{6 * time.Second, true, 0},
	}
	for _, s := range steps {
		ok, n := l.Allow(t0.Add(s.at))
		if ok != s.ok || n != s.suppressed {
			t.Fatalf("at %v: Allow = %v, %d; want %v, %d", s.at, ok, n, s.ok, s.suppressed)
		}
	}
}

// A clock that starts at the zero time (a test's, or a fresh process's
// monotonic base) still lets the first line through.
func TestLimiterFirstLineAtZeroTime(t *testing.T) {
	l := Limiter{Every: time.Hour}
	if ok, _ := l.Allow(time.Time{}); !ok {
		t.Fatal("the first line was suppressed")
	}
}
