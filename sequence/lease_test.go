package sequence

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

func TestLeasePolicy(t *testing.T) {
	p := LeasePolicy{PrefillTokenTime: time.Millisecond, DecodeTokenTime: 50 * time.Millisecond,
		DefaultOutputTokens: 1000, Min: 10 * time.Second}
	hour := time.Hour
	tests := []struct {
		name        string
		p           LeasePolicy
		isl, output uint64
		ceiling     time.Duration
		lease, post time.Duration // For, AfterPrefill
	}{
		{"prompt and output", p, 8000, 400, hour, 8*time.Second + 20*time.Second, 20 * time.Second},
		{"no output named: the default", p, 2000, 0, hour, 2*time.Second + 50*time.Second, 50 * time.Second},
		{"short request: the minimum", p, 10, 10, hour, 10 * time.Second, 10 * time.Second},
		{"capped by the expiry", p, 0, 1 << 20, hour, hour, hour},
		{"a ceiling under the minimum wins", p, 10, 10, time.Second, time.Second, time.Second},
		{"absurd output saturates", p, math.MaxUint64, math.MaxUint64, hour, hour, hour},
		{"off", LeasePolicy{}, 8000, 400, hour, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.For(tt.isl, tt.output, tt.ceiling); got != tt.lease {
				t.Errorf("For = %s, want %s", got, tt.lease)
			}
			if got := tt.p.AfterPrefill(tt.output, tt.ceiling); got != tt.post {
				t.Errorf("AfterPrefill = %s, want %s", got, tt.post)
			}
		})
	}
	if got := p.Renewal(hour); got != p.Min {
		t.Errorf("Renewal = %s, want the minimum %s", got, p.Min)
	}
	if err := (LeasePolicy{DecodeTokenTime: time.Millisecond}).Validate(); err == nil {
		t.Error("a lease without a minimum passed validation")
	}
	if err := (LeasePolicy{Min: -time.Second}).Validate(); err == nil {
		t.Error("a negative minimum passed validation")
	}
	if err := DefaultLeasePolicy().Validate(); err != nil {
		t.Errorf("default policy: %v", err)
	}
}

// A leased request expires at its lease's end, renewals push that end
// out (never back), and an unleased one (a peer's) keeps the expiry.
func TestLeaseExpiry(t *testing.T) {
	s := New(Config{AssumeKVReuse: true, ExpiryDuration: time.Hour})
	t0 := time.Unix(1000, 0)
	add := func(id string, lease time.Duration) {
		t.Helper()
		if err := s.AddRequest(Request{ID: id, SequenceHashes: hashes(1, 2), ISL: 32, Lease: lease}, t0); err != nil {
			t.Fatal(err)
		}
	}
	add("leased", time.Minute)
	add("renewed", time.Minute)
	add("peer", 0)

	if end, err := s.Renew("renewed", t0.Add(50*time.Second), time.Minute); err != nil || !end.Equal(t0.Add(110*time.Second)) {
		t.Fatalf("Renew = %v, %v; want the lease to end at t0+110s", end, err)
	}
	if end, _ := s.Renew("renewed", t0.Add(55*time.Second), time.Second); !end.Equal(t0.Add(110 * time.Second)) {
		t.Errorf("a shorter renewal moved the end to %v", end)
	}
	if end, err := s.Renew("peer", t0, time.Minute); err != nil || !end.IsZero() {
		t.Errorf("renewing an unleased request: %v, %v; want no lease", end, err)
	}
	if _, err := s.Renew("gone", t0, time.Minute); !errors.Is(err, ErrUnknownRequest) {
		t.Errorf("renewing an unknown request: %v", err)
	}

	steps := []struct {
		at      time.Duration
		leased  int
		expired []string
	}{
		{time.Minute, 0, nil}, // a lease ends after, not at, its last instant
		{61 * time.Second, 1, []string{"leased"}},
		{110 * time.Second, 0, nil},
		{111 * time.Second, 1, []string{"renewed"}},
		{time.Hour + time.Second, 0, []string{"peer"}},
	}
	for _, st := range steps {
		now := t0.Add(st.at)
		if leased, _ := s.Expired(now); leased != st.leased {
			t.Errorf("at +%s: Expired counts %d leased, want %d", st.at, leased, st.leased)
		}
		if got := s.ExpireStale(now); !slices.Equal(got, st.expired) {
			t.Errorf("at +%s: expired %v, want %v", st.at, got, st.expired)
		}
	}
	if l := s.Load(); l.ActiveRequests != 0 || l.ActiveBlocks != 0 {
		t.Errorf("load after every expiry: %+v", l)
	}
}

func TestSweepIntervalFollowsTheLease(t *testing.T) {
	c := DefaultConfig()
	c.Lease.Min = 20 * time.Second
	if got := c.SweepInterval(30 * time.Second); got != 10*time.Second {
		t.Errorf("SweepInterval = %s, want half the lease minimum", got)
	}
	c.Lease = LeasePolicy{}
	if got := c.SweepInterval(30 * time.Second); got != 30*time.Second {
		t.Errorf("without leases SweepInterval = %s, want the check interval", got)
	}
}
