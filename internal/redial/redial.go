// Package redial paces the router's reconnects to things outside it (ZMQ
// event publishers, NATS): exponential backoff with jitter per endpoint,
// so an endpoint that accepts and drops connections is dialled once per
// backoff (every 2.5–5 s by default), not thousands of times a second,
// and a connection-rate
// cap shared by every endpoint of a kind, so many such endpoints together
// are bounded too.
package redial

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Policy is how one endpoint's reconnects are spaced.
type Policy struct {
	// Base is the wait after the first failure; it doubles with each
	// further failure in a row.
	Base time.Duration
	// Max bounds the wait.
	Max time.Duration
	// StableAfter: a connection that stayed up this long ends the run of
	// failures (the next wait is Base again); a shorter one counts as a
	// failure, so an endpoint that accepts and closes backs off as one
	// that refuses does.
	StableAfter time.Duration
}

// DefaultPolicy: a quarter second first (an engine restarting comes back
// fast and every second without its events is stale routing), up to 5 s
// (a restarted engine is heard from within 5 s of coming back; an
// endpoint that keeps failing is dialled at most every 2.5 to 5 s).
func DefaultPolicy() Policy {
	return Policy{Base: 250 * time.Millisecond, Max: 5 * time.Second, StableAfter: 10 * time.Second}
}

// Validate rejects a policy that cannot space anything.
func (p Policy) Validate() error {
	if p.Base <= 0 || p.Max < p.Base || p.StableAfter <= 0 {
		return fmt.Errorf("reconnect backoff: base %v must be > 0, max %v >= base, stable-after %v > 0", p.Base, p.Max, p.StableAfter)
	}
	return nil
}

// Delay is the wait before the retry that follows n failures in a row
// (n >= 1): Base·2^(n-1) capped at Max, with equal jitter (half of it
// fixed, half drawn from rnd in [0, 1)), so retries of many endpoints
// that failed together spread out while each still waits at least half.
func (p Policy) Delay(n int, rnd float64) time.Duration {
	d := p.Base
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	return d/2 + time.Duration(rnd*float64(d/2))
}

// Backoff follows one endpoint's failures. It is used by one goroutine.
type Backoff struct {
	Policy Policy
	// Rand draws the jitter (nil: math/rand/v2).
	Rand func() float64
	// Waits, when set, is told of the wait this endpoint is in.
	Waits *Waits

	failures int
}

// Failed counts a failure (a refused dial, a failed handshake, a
// connection that dropped before StableAfter) and returns how long to wait
// before the next attempt.
func (b *Backoff) Failed() time.Duration {
	b.failures++
	return b.wait()
}

// Dropped is a connection that ended after upFor: a long-lived one starts
// the backoff over, a short one is a failure. It returns the wait before
// the next attempt (never zero: a dropped connection is redialled no
// sooner than Base/2).
func (b *Backoff) Dropped(upFor time.Duration) time.Duration {
	if upFor >= b.Policy.StableAfter {
		b.failures = 0
	}
	return b.Failed()
}

// Connected reports the endpoint is no longer waiting.
func (b *Backoff) Connected() { b.Waits.set(b, 0) }

// Close removes the endpoint from Waits.
func (b *Backoff) Close() { b.Waits.remove(b) }

// Failures is the run of failures so far.
func (b *Backoff) Failures() int { return b.failures }

func (b *Backoff) wait() time.Duration {
	rnd := rand.Float64
	if b.Rand != nil {
		rnd = b.Rand
	}
	d := b.Policy.Delay(b.failures, rnd())
	b.Waits.set(b, d)
	return d
}

// Waits is the backoff each endpoint of a kind is in, for the current
// backoff gauge. Its zero value is ready; a nil *Waits ignores reports.
type Waits struct {
	mu  sync.Mutex
	cur map[any]time.Duration // endpoint handle → its wait
}

func (w *Waits) set(b *Backoff, d time.Duration) { w.Report(b, d) }

func (w *Waits) remove(b *Backoff) { w.Forget(b) }

// Report sets the wait of the endpoint known by key (a comparable handle
// its owner keeps; 0: connected).
func (w *Waits) Report(key any, d time.Duration) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil {
		w.cur = map[any]time.Duration{}
	}
	w.cur[key] = d
}

// Forget drops an endpoint that is gone.
func (w *Waits) Forget(key any) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.cur, key)
}

// Max is the longest backoff an endpoint is in (0: none is backing off).
func (w *Waits) Max() time.Duration {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var m time.Duration
	for _, d := range w.cur {
		m = max(m, d)
	}
	return m
}

// Waiting is how many endpoints are in a backoff.
func (w *Waits) Waiting() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, d := range w.cur {
		if d > 0 {
			n++
		}
	}
	return n
}

// Limiter caps the rate of connection attempts shared by many endpoints:
// a token bucket of Burst tokens refilled at Rate per second. It is safe
// for concurrent use.
type Limiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// NewLimiter allows rate attempts a second on average and burst at once;
// now is the clock (nil: time.Now).
func NewLimiter(rate float64, burst int, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{rate: rate, burst: float64(max(burst, 1)), now: now, tokens: float64(max(burst, 1)), last: now()}
}

// Reserve takes one attempt's token and returns how long to wait before
// making it: zero while the bucket holds tokens, then the time the rate
// needs to refill what was taken ahead. A nil Limiter never waits.
func (l *Limiter) Reserve() time.Duration {
	if l == nil || l.rate <= 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.After(l.last) {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
		l.last = now
	}
	l.tokens--
	if l.tokens >= 0 {
		return 0
	}
	return time.Duration(-l.tokens / l.rate * float64(time.Second))
}

// Sleep waits d or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
