package loglimit

import (
	"testing"
	"time"
)

func TestKeyedFirstLinePerKeyThenRateLimited(t *testing.T) {
	k := Keyed[uint64]{Every: time.Minute}
	t0 := time.Unix(1000, 0)
	type want struct {
		ok, first  bool
		suppressed int
	}
	steps := []struct {
		key uint64
		at  time.Duration
		want
	}{
		{7, 0, want{true, true, 0}},
		{7, time.Second, want{false, false, 0}},
		{8, 2 * time.Second, want{true, true, 0}}, // another key is not held back
		{7, 3 * time.Second, want{false, false, 0}},
		{7, 61 * time.Second, want{true, false, 2}},
		{8, 63 * time.Second, want{true, false, 0}},
		{7, 62 * time.Second, want{false, false, 0}},
	}
	for i, s := range steps {
		ok, first, n := k.Allow(s.key, t0.Add(s.at))
		if (want{ok, first, n}) != s.want {
			t.Fatalf("step %d (key %d at %v): got %v %v %d, want %+v", i, s.key, s.at, ok, first, n, s.want)
		}
	}
	k.Forget(7)
	if ok, first, _ := k.Allow(7, t0.Add(63*time.Second)); !ok || !first {
		t.Fatal("a forgotten key's next line is not a first")
	}
}

func TestKeyedIsBounded(t *testing.T) {
	k := Keyed[int]{Every: time.Hour, MaxKeys: 16}
	now := time.Unix(0, 0)
	for i := range 10_000 {
		if ok, first, _ := k.Allow(i, now); !ok || !first {
			t.Fatalf("key %d: first line held back", i)
		}
	}
	if n := len(k.keys); n > 16 {
		t.Fatalf("remembers %d keys, bound 16", n)
	}
}
