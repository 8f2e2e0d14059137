package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// progressEvery is how often a running point prints its progress line.
const progressEvery = 5 * time.Second

// defaultPointOverhead is the guess, before any point has finished, of
// what a point takes beyond its arrival span (fleet start, draining the
// last requests, fleet stop).
const defaultPointOverhead = 3 * time.Second

// sweepProgress prints, one plain line at a time (no terminal control
// codes, so a log file or CI output stays readable), which point of the
// sweep is running, how many of its requests are done and how long the
// whole sweep has left.
type sweepProgress struct {
	w       io.Writer
	start   time.Time
	total   int             // measured points (the oracle is computed, not run)
	spans   []time.Duration // arrival span of every measured point, in run order
	done    int             // finished points
	extra   time.Duration   // sum over finished points of took - span
	current time.Time       // start of the running point
}

func newSweepProgress(w io.Writer, spans []time.Duration) *sweepProgress {
	return &sweepProgress{w: w, start: time.Now(), total: len(spans), spans: spans}
}

// overhead is the mean time a finished point took beyond its arrival
// span, or defaultPointOverhead before the first one finished.
func (p *sweepProgress) overhead() time.Duration {
	if p.done == 0 {
		return defaultPointOverhead
	}
	return max(p.extra/time.Duration(p.done), 0)
}

// timeLeft estimates what the sweep has left when the running point has
// been going for elapsed: the rest of its arrival span, then every later
// point's span, each plus the mean overhead seen so far.
func (p *sweepProgress) timeLeft(elapsed time.Duration) time.Duration {
	if p.done >= p.total {
		return 0
	}
	oh := p.overhead()
	left := max(p.spans[p.done]+oh-elapsed, 0)
	for _, s := range p.spans[p.done+1:] {
		left += s + oh
	}
	return left
}

// startPoint announces the next point.
func (p *sweepProgress) startPoint(policy string, qps float64, requests int) {
	if p == nil {
		return
	}
	p.current = time.Now()
	fmt.Fprintf(p.w, "[%d/%d] %s at %g requests/s: starting the fleet (%d requests, about %s left in the sweep)\n",
		p.done+1, p.total, policy, qps, requests, roundDur(p.timeLeft(0)))
}

// report prints the running point's progress line: requests sent so
// far and finished (under overload many are in flight at once).
func (p *sweepProgress) report(policy string, qps float64, sent, done, requests int) {
	if p == nil {
		return
	}
	elapsed := time.Since(p.current)
	fmt.Fprintf(p.w, "[%d/%d] %s at %g requests/s: %d/%d requests sent, %d done, %s elapsed, about %s left in the sweep\n",
		p.done+1, p.total, policy, qps, sent, requests, done, roundDur(time.Since(p.start)), roundDur(p.timeLeft(elapsed)))
}

// endPoint records the point that just finished.
func (p *sweepProgress) endPoint() {
	if p == nil {
		return
	}
	if p.done < p.total {
		p.extra += time.Since(p.current) - p.spans[p.done]
	}
	p.done++
}

// watch prints the running point's progress every progressEvery until
// ctx ends, reading the request counts from c.
func (p *sweepProgress) watch(ctx context.Context, policy string, qps float64, c countingDispatcher, requests int) {
	if p == nil {
		return
	}
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.report(policy, qps, int(c.sent.Load()), int(c.done.Load()), requests)
		}
	}
}

func roundDur(d time.Duration) time.Duration { return d.Round(time.Second) }

// countingDispatcher counts the requests sent (Acquire) and those whose
// release was called, i.e. that finished (successfully or not).
type countingDispatcher struct {
	Dispatcher
	sent, done *atomic.Int64
}

func newCountingDispatcher(d Dispatcher) countingDispatcher {
	return countingDispatcher{Dispatcher: d, sent: new(atomic.Int64), done: new(atomic.Int64)}
}

func (c countingDispatcher) Acquire() (string, func()) {
	c.sent.Add(1)
	url, release := c.Dispatcher.Acquire()
	return url, func() {
		release()
		c.done.Add(1)
	}
}

// arrivalSpan is the offset of the last arrival of reqs.
func arrivalSpan(reqs []Request) time.Duration {
	var span time.Duration
	for _, r := range reqs {
		span = max(span, r.Arrival)
	}
	return span
}
