// Package enginepoll watches engines that never heartbeat: every replica
// polls each engine's /health and /metrics (jittered, with a per-engine
// timeout and backoff while it fails), reads vLLM's and SGLang's load
// metrics with expfmt, and reports transitions — healthy/unhealthy, and
// which dp ranks are busy under Dynamo's busy thresholds
// (scheduling.EngineBusy) — to a callback that sets the worker's
// conditions in the registry. It keeps the last load of every engine for
// export.
package enginepoll

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/scheduling"
)

// Target is one engine to watch.
type Target struct {
	ID      kv.WorkerID
	URL     string // base URL: /health and /metrics are appended
	DPStart uint32
	DPSize  uint32 // 0 counts as 1
}

func (t Target) ranks() []uint32 {
	out := make([]uint32, 0, max(t.DPSize, 1))
	for r := t.DPStart; r < t.DPStart+max(t.DPSize, 1); r++ {
		out = append(out, r)
	}
	return out
}

// Verdict is what a poll concluded about an engine.
type Verdict struct {
	Healthy bool
	// Reason says why an engine is unhealthy.
	Reason string
	// BusyRanks are the dp ranks over the busy thresholds, sorted.
	BusyRanks []uint32
}

// Change is a transition reported to Options.OnChange: Health when the
// engine turned healthy or unhealthy, Busy when its busy ranks changed.
type Change struct {
	Verdict
	Health, Busy bool
}

// Options configure a Poller.
type Options struct {
	// Interval between polls of one engine (jittered by ±Jitter).
	Interval time.Duration
	// Timeout bounds one poll (/health and /metrics together).
	Timeout time.Duration
	// MaxBackoff bounds the wait between polls of a failing engine: it
	// doubles from Interval with every failure.
	MaxBackoff time.Duration
	// Jitter is the fraction the interval varies by, so a fleet's polls
	// spread out (0.1 = ±10%).
	Jitter float64
	// FailureThreshold is how many failed health checks in a row make an
	// engine unhealthy (1 = the first).
	FailureThreshold int
	// Thresholds decide busy (negative thresholds are off).
	Thresholds scheduling.BusyThresholds
	// Metrics: poll /metrics too (load and busy); false polls /health only.
	Metrics bool
	// MaxMetricsBytes bounds an engine's /metrics page (0: 16 MiB).
	MaxMetricsBytes int64
	// OnChange receives every transition, from the engine's goroutine; it
	// may block (the next poll of that engine waits).
	OnChange func(kv.WorkerID, Change)
	Client   *http.Client // nil: a client with keep-alive sized for many engines
	Logger   *slog.Logger
}

// DefaultOptions: polled every second, as the default.
func DefaultOptions() Options {
	return Options{
		Interval: time.Second, Timeout: 2 * time.Second, MaxBackoff: 5 * time.Second, Jitter: 0.1,
		FailureThreshold: 1, Thresholds: scheduling.BusyThresholds{KVUsage: -1, Waiting: -1}, Metrics: true,
	}
}

// Validate rejects settings a poller cannot run with.
func (o Options) Validate() error {
	switch {
	case o.Interval <= 0 || o.Timeout <= 0:
		return fmt.Errorf("engine poll interval and timeout must be > 0, got %v and %v", o.Interval, o.Timeout)
	case o.MaxBackoff < o.Interval:
		return fmt.Errorf("engine poll max backoff %v must be >= the interval %v", o.MaxBackoff, o.Interval)
	case o.Jitter < 0 || o.Jitter >= 1:
		return fmt.Errorf("engine poll jitter must be in [0, 1), got %v", o.Jitter)
	case o.FailureThreshold < 1:
		return fmt.Errorf("engine unhealthy threshold must be >= 1, got %d", o.FailureThreshold)
	case o.Thresholds.KVUsage > 1:
		return fmt.Errorf("KV usage busy threshold is a fraction, got %v", o.Thresholds.KVUsage)
	}
	return nil
}

// Limits on what an engine may send back.
const (
	maxHealthBytes         = 64 << 10
	defaultMaxMetricsBytes = 16 << 20
	// metricsLogEvery: an engine whose /metrics keeps failing the same
	// way is logged again at most this often (every failure is counted).
	metricsLogEvery = time.Minute
)

// Poller polls a changing set of engines, one goroutine each.
type Poller struct {
	opts    Options
	client  *http.Client
	log     *slog.Logger
	mu      sync.Mutex
	engines map[kv.WorkerID]*engine
	closed  bool
	wg      sync.WaitGroup
	stats   counters
}

type counters struct {
	polls, healthFailures, unhealthy, healthy, busy, idle atomic.Uint64
	mu                                                    sync.Mutex
	metricsErrors                                         map[string]uint64
}

// New returns a poller with no engines.
func New(opts Options) (*Poller, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxMetricsBytes <= 0 {
		opts.MaxMetricsBytes = defaultMaxMetricsBytes
	}
	client := opts.Client
	if client == nil {
		client = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // engines are on the pod network; never through a proxy
			DialContext:         (&net.Dialer{Timeout: opts.Timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        0, // no global cap: one kept connection per engine
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     max(90*time.Second, 3*opts.MaxBackoff),
			DisableCompression:  true,
		}}
	}
	return &Poller{opts: opts, client: client, log: opts.Logger.With("component", "enginepoll"),
		engines: map[kv.WorkerID]*engine{}, stats: counters{metricsErrors: map[string]uint64{}}}, nil
}

// Set makes the polled engines exactly targets: new ones start (their
// first poll within one interval), gone ones stop, changed ones restart.
func (p *Poller) Set(targets []Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	want := make(map[kv.WorkerID]Target, len(targets))
	for _, t := range targets {
		want[t.ID] = t
	}
	for id, e := range p.engines {
		if t, ok := want[id]; !ok || t != e.target {
			e.cancel()
			delete(p.engines, id)
		}
	}
	for id, t := range want {
		if _, ok := p.engines[id]; ok {
			continue
		}
		e := &engine{p: p, target: t, verdict: Verdict{Healthy: true}}
		e.ctx, e.cancel = context.WithCancel(context.Background())
		p.engines[id] = e
		p.wg.Go(e.run)
	}
}

// Close stops every engine's polling and waits for it.
func (p *Poller) Close() {
	p.mu.Lock()
	p.closed = true
	for id, e := range p.engines {
		e.cancel()
		delete(p.engines, id)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// RankLoad is one rank's last reported load.
type RankLoad struct {
	DpRank uint32
	scheduling.EngineLoad
	Busy bool
}

// EngineState is an engine's last poll.
type EngineState struct {
	ID kv.WorkerID
	Verdict
	// Ranks: the last load read from /metrics (empty while it fails).
	Ranks []RankLoad
	// MetricsError is why the last /metrics read failed ("" = it did not).
	MetricsError string
	LastPoll     time.Time
}

// States lists every polled engine's last state, sorted by id.
func (p *Poller) States() []EngineState {
	p.mu.Lock()
	engines := make([]*engine, 0, len(p.engines))
	for _, e := range p.engines {
		engines = append(engines, e)
	}
	p.mu.Unlock()
	out := make([]EngineState, 0, len(engines))
	for _, e := range engines {
		e.mu.Lock()
		st := EngineState{ID: e.target.ID, Verdict: e.verdict, Ranks: slices.Clone(e.loads), MetricsError: e.metricsErr, LastPoll: e.lastPoll}
		e.mu.Unlock()
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b EngineState) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Stats are the poller's totals.
type Stats struct {
	Polls, HealthFailures uint64
	// Transitions to unhealthy, healthy, busy (some rank) and idle (none).
	Unhealthy, Healthy, Busy, Idle uint64
	// MetricsErrors by reason: unreachable, timeout, status, malformed,
	// no_load_metrics, too_large.
	MetricsErrors map[string]uint64
}

// Stats returns the poller's totals.
func (p *Poller) Stats() Stats {
	s := &p.stats
	s.mu.Lock()
	errs := make(map[string]uint64, len(s.metricsErrors))
	for k, v := range s.metricsErrors {
		errs[k] = v
	}
	s.mu.Unlock()
	return Stats{Polls: s.polls.Load(), HealthFailures: s.healthFailures.Load(), Unhealthy: s.unhealthy.Load(),
		Healthy: s.healthy.Load(), Busy: s.busy.Load(), Idle: s.idle.Load(), MetricsErrors: errs}
}

// engine is one polled engine: its goroutine owns everything but what
// mu guards (read by States).
type engine struct {
	p      *Poller
	target Target
	// ctx ends when the engine is removed: its poll in flight is cut
	// short and nothing more is reported.
	ctx      context.Context
	cancel   context.CancelFunc
	failures int

	// metricsReason and metricsLogged rate-limit the log of /metrics
	// failures: a new reason is logged at once, the same one again after
	// metricsLogEvery.
	metricsReason string
	metricsLogged time.Time

	mu         sync.Mutex
	verdict    Verdict
	loads      []RankLoad
	metricsErr string
	lastPoll   time.Time
}

func (e *engine) run() {
	o := e.p.opts
	// The first poll lands anywhere in the first interval, so a fleet
	// registered at once does not poll in lockstep.
	t := time.NewTimer(time.Duration(rand.Int64N(int64(o.Interval))))
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		e.poll()
		// Start to start: a slow engine is still polled once an interval.
		t.Reset(max(e.nextDelay()-time.Since(start), 0))
	}
}

// nextDelay is the interval, doubled per failure up to MaxBackoff, ±Jitter.
func (e *engine) nextDelay() time.Duration {
	o := e.p.opts
	d := o.Interval
	for i := 1; i < e.failures && d < o.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, o.MaxBackoff)
	if o.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + o.Jitter*(2*rand.Float64()-1)))
	}
	return d
}

func (e *engine) poll() {
	o := e.p.opts
	ctx, cancel := context.WithTimeout(e.ctx, o.Timeout)
	defer cancel()
	e.p.stats.polls.Add(1)
	next := Verdict{Healthy: true}
	var loads []RankLoad
	metricsErr, metricsReason := "", ""
	if err := e.health(ctx); err != nil {
		e.failures++
		e.p.stats.healthFailures.Add(1)
		e.mu.Lock()
		prev := e.verdict
		e.mu.Unlock()
		if e.failures < o.FailureThreshold && prev.Healthy {
			return // not yet: keep the last verdict
		}
		next = Verdict{Healthy: false, Reason: err.Error()}
	} else {
		e.failures = 0
		if o.Metrics {
			var err error
			if loads, metricsReason, err = e.metrics(ctx); err != nil {
				metricsErr = err.Error()
			}
			for _, l := range loads {
				if l.Busy {
					next.BusyRanks = append(next.BusyRanks, l.DpRank)
				}
			}
		}
	}
	if e.ctx.Err() != nil {
		return // removed meanwhile: report nothing
	}
	now := time.Now()
	e.mu.Lock()
	prev := e.verdict
	e.verdict, e.loads, e.metricsErr, e.lastPoll = next, loads, metricsErr, now
	e.mu.Unlock()
	if next.Healthy {
		e.logMetrics(metricsReason, metricsErr, now)
	}
	e.report(prev, next)
}

// logMetrics logs a /metrics failure when its reason changes, or again
// after metricsLogEvery, and its end.
func (e *engine) logMetrics(reason, msg string, now time.Time) {
	log := e.p.log
	switch {
	case reason != "" && (reason != e.metricsReason || now.Sub(e.metricsLogged) >= metricsLogEvery):
		log.Warn("engine /metrics unreadable: its load is unknown and it counts as not busy",
			"worker", e.target.ID, "url", e.target.URL, "reason", reason, "err", msg)
		e.metricsLogged = now
	case reason == "" && e.metricsReason != "":
		log.Info("engine /metrics readable again", "worker", e.target.ID, "url", e.target.URL)
	}
	e.metricsReason = reason
}

// report logs and counts transitions and hands them to OnChange.
func (e *engine) report(prev, next Verdict) {
	log, st := e.p.log, &e.p.stats
	id, url := e.target.ID, e.target.URL
	ch := Change{Verdict: next, Health: prev.Healthy != next.Healthy, Busy: !slices.Equal(prev.BusyRanks, next.BusyRanks)}
	if ch.Health {
		if next.Healthy {
			st.healthy.Add(1)
			log.Info("engine healthy again: routable", "worker", id, "url", url)
		} else {
			st.unhealthy.Add(1)
			log.Warn("engine unhealthy: no new requests until it recovers", "worker", id, "url", url, "reason", next.Reason)
		}
	}
	if ch.Busy {
		if len(next.BusyRanks) > 0 {
			st.busy.Add(1)
			log.Info("engine busy: its own queue or KV usage is over the busy thresholds", "worker", id, "busy_ranks", next.BusyRanks)
		} else {
			st.idle.Add(1)
			log.Info("engine no longer busy", "worker", id)
		}
	}
	if (ch.Health || ch.Busy) && e.p.opts.OnChange != nil {
		e.p.opts.OnChange(id, ch)
	}
}

func (e *engine) health(ctx context.Context) error {
	if err := e.get(ctx, "/health", maxHealthBytes, nil); err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	return nil
}

// metrics reads the engine's load and applies the busy thresholds; a
// failure is counted under its reason, which it returns.
func (e *engine) metrics(ctx context.Context) ([]RankLoad, string, error) {
	var loads Loads
	var perr error
	err := e.get(ctx, "/metrics", e.p.opts.MaxMetricsBytes, func(page []byte) error {
		loads, perr = ParseMetrics(page)
		return nil
	})
	if err != nil {
		reason := reasonOf(err)
		e.p.countMetricsError(reason)
		return nil, reason, fmt.Errorf("metrics: %w", err)
	}
	if err := perr; err != nil {
		reason := "malformed"
		if errors.Is(err, ErrNoLoadMetrics) {
			reason = "no_load_metrics"
		}
		e.p.countMetricsError(reason)
		return nil, reason, err
	}
	return e.rankLoads(loads), "", nil
}

// rankLoads maps the engine's series onto the target's ranks: a rank
// label inside the target's range is that rank, a smaller one an offset
// from its first rank; unlabelled series stand for every rank.
func (e *engine) rankLoads(loads Loads) []RankLoad {
	t := e.target
	size := max(t.DPSize, 1)
	var out []RankLoad
	for _, rk := range t.ranks() {
		l, ok := loads[int64(rk)]
		if !ok && rk-t.DPStart < size && t.DPStart > 0 {
			l, ok = loads[int64(rk-t.DPStart)]
		}
		if !ok {
			l, ok = loads[AllRanks]
		}
		if !ok {
			continue
		}
		out = append(out, RankLoad{DpRank: rk, EngineLoad: l, Busy: scheduling.EngineBusy(l, e.p.opts.Thresholds)})
	}
	return out
}

func (p *Poller) countMetricsError(reason string) {
	p.stats.mu.Lock()
	p.stats.metricsErrors[reason]++
	p.stats.mu.Unlock()
}

// errStatus is a non-2xx answer.
type errStatus struct{ code int }

func (e errStatus) Error() string { return fmt.Sprintf("HTTP %d", e.code) }

var errTooLarge = errors.New("answer too large")

func reasonOf(err error) string {
	var st errStatus
	switch {
	case errors.As(err, &st):
		return "status"
	case errors.Is(err, errTooLarge):
		return "too_large"
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return "timeout"
	}
	return "unreachable"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// bufs are the pages being read: a page is parsed and dropped, so a few
// buffers serve a whole fleet polled in turn (one per engine would keep
// a page-sized buffer per engine alive).
var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// get fetches base+path, reading at most limit bytes of a 2xx answer, and
// hands the body to use (valid only during the call).
func (e *engine) get(ctx context.Context, path string, limit int64, use func([]byte) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(e.target.URL, "/")+path, nil)
	if err != nil {
		return err
	}
	if path == "/metrics" {
		req.Header.Set("Accept", "text/plain;version=0.0.4")
	}
	resp, err := e.p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf := bufs.Get().(*bytes.Buffer)
	defer bufs.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, limit+1)); err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errStatus{resp.StatusCode}
	}
	if int64(buf.Len()) > limit {
		return errTooLarge
	}
	if use == nil {
		return nil
	}
	return use(buf.Bytes())
}
