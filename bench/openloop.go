package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Schedule is the intended send times of an open-loop load: request i is
// due at Start + i/Rate, for every i whose time falls before Start+Span.
// The times do not depend on when earlier requests were answered, so a
// slow answer cannot postpone (and hide) the requests behind it.
type Schedule struct {
	Start time.Time
	Rate  float64 // requests per second
	Count int     // requests in the schedule
}

// NewSchedule covers span at rate from start.
func NewSchedule(start time.Time, rate float64, span time.Duration) (Schedule, error) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return Schedule{}, fmt.Errorf("schedule: rate must be a positive number, got %v", rate)
	}
	if span <= 0 {
		return Schedule{}, fmt.Errorf("schedule: span must be positive, got %v", span)
	}
	// Request i is in the schedule when i/rate < span. The epsilon keeps
	// an exact product (5 s x 500/s) from gaining a 2,501st request
	// through rounding.
	n := int(math.Ceil(span.Seconds()*rate - 1e-9))
	return Schedule{Start: start, Rate: rate, Count: max(n, 1)}, nil
}

// At is request i's intended send time.
func (s Schedule) At(i int) time.Time {
	return s.Start.Add(s.Offset(i))
}

// Offset is request i's intended send time after Start.
func (s Schedule) Offset(i int) time.Duration {
	return time.Duration(math.Round(float64(i) * float64(time.Second) / s.Rate))
}

// Due is how many requests are due at now (their intended time is not
// after now), at most Count.
func (s Schedule) Due(now time.Time) int {
	d := now.Sub(s.Start)
	if d < 0 {
		return 0
	}
	// Start from the estimate and correct it against Offset itself, so Due
	// and At agree exactly at the boundaries.
	i := int(d.Seconds() * s.Rate)
	for i > 0 && s.Offset(i-1) > d {
		i--
	}
	for i < s.Count && s.Offset(i) <= d {
		i++
	}
	return min(i, s.Count)
}

// Outcome classes an open-loop request can end in besides success.
const (
	// ClassDropped: the request was due while MaxInFlight requests were
	// out and MaxBacklog more were already waiting, so it was never sent.
	ClassDropped = "dropped (backlog full)"
	// ClassExpired: the request waited for a free connection longer than
	// the timeout, so it was not sent (it could only have timed out).
	ClassExpired = "expired waiting for a connection"
	// ClassTimeout: no answer within the request timeout.
	ClassTimeout = "timeout"
	// ClassCanceled: the run was interrupted while the request was out.
	ClassCanceled = "canceled"
)

// maxBacklog bounds the default backlog (its channel is allocated up
// front).
const maxBacklog = 1 << 17

// OpenLoopConfig is a fixed-rate load. Requests due during Warmup are sent
// but not recorded.
type OpenLoopConfig struct {
	Rate             float64
	Warmup, Duration time.Duration
	// MaxInFlight bounds the requests outstanding at once: one sender
	// goroutine (and connection) each. A request due when all are busy
	// waits for the next free one; its latency still counts from its
	// scheduled time, and it is counted as late.
	MaxInFlight int
	// Timeout: a request that waited this long for a free sender is not
	// sent but counted as expired (0 = never).
	Timeout time.Duration
	// MaxBacklog bounds the requests waiting for a free sender; more are
	// dropped and counted. 0 = enough for Timeout at Rate (at most 131,072).
	MaxBacklog int

	// onDue, for tests, is called by the dispatcher once it has queued or
	// dropped request seq.
	onDue func(seq int)
}

// Validate reports the first unusable setting.
func (c OpenLoopConfig) Validate() error {
	switch {
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate must be a positive number of requests/s, got %v", c.Rate)
	case c.Duration <= 0:
		return fmt.Errorf("duration must be positive, got %v", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("warmup must not be negative, got %v", c.Warmup)
	case c.MaxInFlight < 1:
		return fmt.Errorf("max in flight must be at least 1, got %d", c.MaxInFlight)
	case c.Timeout < 0:
		return fmt.Errorf("timeout must not be negative, got %v", c.Timeout)
	case c.MaxBacklog < 0:
		return fmt.Errorf("backlog must not be negative, got %d", c.MaxBacklog)
	}
	return nil
}

// backlog is the effective MaxBacklog.
func (c OpenLoopConfig) backlog() int {
	if c.MaxBacklog > 0 {
		return c.MaxBacklog
	}
	if c.Timeout <= 0 {
		return maxBacklog
	}
	return min(maxBacklog, max(c.MaxInFlight, int(math.Ceil(c.Rate*c.Timeout.Seconds()))))
}

// Sender sends one request. Send returns when the answer that counts for
// latency arrived (done) and the outcome class ("" = success); it may do
// more work after that (a follow-up call) before returning. Each sender
// goroutine has its own Sender, so a Sender need not be safe for
// concurrent use.
type Sender interface {
	Send(ctx context.Context, seq int) (done time.Time, class string)
	Close()
}

// OpenLoopResult is what the measured window of an open-loop run saw.
type OpenLoopResult struct {
	Offered   float64       // requests/s asked for
	Window    time.Duration // the measured schedule span (Duration)
	Elapsed   time.Duration // from the window's start to its last answer (at least Window)
	Scheduled int           // requests due in the window
	Sent      int           // of them, sent (not dropped, not expired)
	// Late of them found every sender busy when they were due and waited.
	Late int
	// AllSent counts every request sent, warm-up included (what the
	// target worked on while the step ran).
	AllSent int
	OK      int
	Errors  map[string]int // by class: HTTP status, timeout, dropped, ...
	// Latency is each successful request's time from its intended send
	// time to its answer, sorted.
	Latency []time.Duration
	// SendLag is each sent request's time from its intended send time to
	// when a sender started it, sorted: the generator's own lateness.
	SendLag []time.Duration
}

// Achieved is successful requests per second of Elapsed.
func (r OpenLoopResult) Achieved() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

// SentRate is requests sent per second of the window.
func (r OpenLoopResult) SentRate() float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(r.Sent) / r.Window.Seconds()
}

// Failed is the number of measured requests that did not succeed.
func (r OpenLoopResult) Failed() int {
	n := 0
	for _, c := range r.Errors {
		n += c
	}
	return n
}

type job struct {
	seq      int
	intended time.Time
	measured bool
}

type senderLog struct {
	sent    int
	allSent int
	ok      int
	errs    map[string]int
	lat     []time.Duration
	lag     []time.Duration
	lastEnd time.Time
}

// RunOpenLoop sends requests at cfg.Rate for Warmup+Duration through
// MaxInFlight senders made by newSender, and waits for every request to
// finish (senders must bound their own requests' time). Latency is
// measured from each request's intended send time, so time a request
// spent waiting for the generator or for a free connection counts against
// it (no coordinated omission). Cancelling ctx stops the schedule early;
// the partial result is returned with ctx's error.
func RunOpenLoop(ctx context.Context, cfg OpenLoopConfig, newSender func(i int) Sender) (OpenLoopResult, error) {
	if err := cfg.Validate(); err != nil {
		return OpenLoopResult{}, err
	}
	sched, err := NewSchedule(time.Now(), cfg.Rate, cfg.Warmup+cfg.Duration)
	if err != nil {
		return OpenLoopResult{}, err
	}
	limit := cfg.MaxInFlight + cfg.backlog()
	// Requests out or waiting; the channel holds every one of them, so a
	// send never blocks the dispatcher.
	jobs := make(chan job, limit)
	logs := make([]senderLog, cfg.MaxInFlight)
	var pending atomic.Int64
	var wg sync.WaitGroup
	for i := range cfg.MaxInFlight {
		s := newSender(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.Close()
			runSender(ctx, s, jobs, &logs[i], &pending, cfg.Timeout)
		}()
	}
	d := dispatcher{
		sched: sched, measureFrom: sched.Start.Add(cfg.Warmup), maxInFlight: int64(cfg.MaxInFlight), limit: int64(limit),
		pending: &pending, jobs: jobs, onDue: cfg.onDue,
		res: OpenLoopResult{Offered: cfg.Rate, Window: cfg.Duration, Errors: make(map[string]int)},
	}
	d.run(ctx)
	close(jobs)
	wg.Wait()
	res := d.res
	res.merge(logs, d.measureFrom)
	res.Elapsed = max(res.Elapsed, cfg.Duration)
	return res, ctx.Err()
}

// dispatcher hands the schedule's requests to the senders as they fall
// due.
type dispatcher struct {
	sched       Schedule
	measureFrom time.Time
	maxInFlight int64 // senders
	limit       int64 // senders + backlog
	pending     *atomic.Int64
	jobs        chan<- job
	onDue       func(seq int)
	res         OpenLoopResult
}

// run offers every request at its time, or until ctx ends.
func (d *dispatcher) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	next := 0
	for next < d.sched.Count && ctx.Err() == nil {
		for due := d.sched.Due(time.Now()); next < due; next++ {
			d.offer(next)
		}
		if next < d.sched.Count {
			waitUntil(ctx, timer, d.sched.At(next))
		}
	}
}

// offer queues request seq for a sender, counted as late when every
// sender is busy, or drops it when the backlog is full too.
func (d *dispatcher) offer(seq int) {
	at := d.sched.At(seq)
	measured := !at.Before(d.measureFrom)
	// Only the dispatcher adds, so a check then add cannot overshoot.
	p := d.pending.Load()
	if measured {
		d.res.Scheduled++
	}
	switch {
	case p >= d.limit:
		if measured {
			d.res.Errors[ClassDropped]++
		}
	default:
		d.pending.Add(1)
		if measured && p >= d.maxInFlight {
			d.res.Late++
		}
		d.jobs <- job{seq: seq, intended: at, measured: measured}
	}
	if d.onDue != nil {
		d.onDue(seq)
	}
}

// merge adds the senders' records to r: counts, sorted samples, and the
// elapsed time from measureFrom to the last measured answer.
func (r *OpenLoopResult) merge(logs []senderLog, measureFrom time.Time) {
	var last time.Time
	for _, l := range logs {
		r.OK += l.ok
		r.Sent += l.sent
		r.AllSent += l.allSent
		for c, n := range l.errs {
			r.Errors[c] += n
		}
		r.Latency = append(r.Latency, l.lat...)
		r.SendLag = append(r.SendLag, l.lag...)
		if l.lastEnd.After(last) {
			last = l.lastEnd
		}
	}
	slices.Sort(r.Latency)
	slices.Sort(r.SendLag)
	if !last.IsZero() {
		r.Elapsed = last.Sub(measureFrom)
	}
}

// runSender sends the jobs it receives until the channel closes,
// recording the measured ones in l.
func runSender(ctx context.Context, s Sender, jobs <-chan job, l *senderLog, pending *atomic.Int64, timeout time.Duration) {
	l.errs = make(map[string]int)
	for j := range jobs {
		started := time.Now()
		var done time.Time
		var class string
		switch {
		case ctx.Err() != nil:
			class = ClassCanceled
		case timeout > 0 && started.Sub(j.intended) > timeout:
			class = ClassExpired
		default:
			done, class = s.Send(ctx, j.seq)
		}
		end := time.Now()
		pending.Add(-1)
		if class != ClassExpired && class != ClassCanceled {
			l.allSent++
		}
		if !j.measured {
			continue
		}
		l.lastEnd = end
		if class == ClassExpired || class == ClassCanceled {
			l.errs[class]++
			continue
		}
		l.sent++
		l.lag = append(l.lag, started.Sub(j.intended))
		if class != "" {
			l.errs[class]++
			continue
		}
		l.ok++
		l.lat = append(l.lat, done.Sub(j.intended))
	}
}

// fineSleepBelow is the longest wait the pacer sleeps in the kernel
// rather than on a Go timer.
const fineSleepBelow = 2 * time.Millisecond

// waitUntil returns at t (or when ctx ends), as precisely as the
// platform allows.
func waitUntil(ctx context.Context, timer *time.Timer, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	if d < fineSleepBelow && fineSleep(d) {
		return
	}
	timer.Reset(d)
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// DurationPercentile is the p-th percentile (0 < p <= 100) of sorted by
// the nearest-rank method: the smallest sample that at least p% of the
// samples are not above (HdrHistogram's and wrk's convention, so p99.9
// of 1,000 samples is the largest, not an interpolation). 0 for no
// samples.
func DurationPercentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// The epsilon keeps float error (99.9/100*1000 = 999.0000000000001)
	// from moving an exact rank up by one.
	rank := int(math.Ceil(p/100*float64(len(sorted)) - 1e-9))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// LatencyMs is a latency distribution in milliseconds.
type LatencyMs struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// SummarizeLatency computes the distribution of sorted samples.
func SummarizeLatency(sorted []time.Duration) LatencyMs {
	if len(sorted) == 0 {
		return LatencyMs{}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	return LatencyMs{
		P50: ms(DurationPercentile(sorted, 50)), P90: ms(DurationPercentile(sorted, 90)),
		P99: ms(DurationPercentile(sorted, 99)), P999: ms(DurationPercentile(sorted, 99.9)),
		Max: ms(sorted[len(sorted)-1]), Mean: ms(sum / time.Duration(len(sorted))),
	}
}
