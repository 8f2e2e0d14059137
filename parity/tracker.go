package parity

import (
	"sort"
	"sync"
	"time"
)

// Source says where the router's token count of a request came from.
type Source int

const (
	// SourceRouter: the router tokenized text or chat in process. Only
	// these requests judge the model's tokenizer.
	SourceRouter Source = iota
	// SourceEngine: the router asked an engine's /tokenize.
	SourceEngine
	// SourceTokenIDs: the client sent token ids.
	SourceTokenIDs
)

// Usage is what the engine reported about a request's prompt.
type Usage struct {
	PromptTokens int
	// CachedTokens is usage.prompt_tokens_details.cached_tokens; HasCached
	// is false when the engine did not report it (vLLM without
	// --enable-prompt-tokens-details).
	CachedTokens int
	HasCached    bool
}

// Observation is one proxied request with the engine's usage.
type Observation struct {
	Model  string
	Worker uint64
	DpRank uint32
	Source Source
	// RouterTokens is the router's token count of the prompt.
	RouterTokens int
	// PredictedCachedTokens is the cache hit the route decision expected
	// on this rank (overlap blocks × block size); HasPrediction is false
	// when the decision carries none to compare (a disaggregated decode).
	PredictedCachedTokens int
	HasPrediction         bool
	Usage                 Usage
}

// Result is what one observation changed.
type Result struct {
	// Mismatch: the engine's prompt_tokens differ from the router's.
	Mismatch bool
	// Predicted, Confirmed and Unconfirmed are cached tokens: the
	// router's prediction (capped as the engine caps a hit: never the
	// prompt's last token), the engine's count, and the predicted tokens
	// the engine did not confirm. CacheCompared is false when either
	// side is missing.
	CacheCompared                     bool
	Predicted, Confirmed, Unconfirmed int
	// Breached: the model's window crossed the threshold with this
	// observation (reported once per crossing).
	Breached bool
	// Switched: the model was switched to engine tokenization.
	Switched bool
	// Ratio is the model's window parity ratio after the observation.
	Ratio float64
}

// RankKey names a worker rank.
type RankKey struct {
	Worker uint64
	DpRank uint32
}

// Drift is a rank's "predicted hits the engine did not confirm" over its
// window.
type Drift struct {
	// Samples is how many requests with a predicted hit the window holds.
	Samples int
	// PredictedTokens and UnconfirmedTokens sum the window.
	PredictedTokens, UnconfirmedTokens int
	// Rate is UnconfirmedTokens / PredictedTokens (0 with nothing
	// predicted).
	Rate float64
	At   time.Time
	// RequestPredicted and RequestConfirmed are the request that brought
	// this report: its predicted hit (capped as the engine caps it) and
	// the cached tokens the engine confirmed, for an observer that keeps
	// a window of its own (index trust).
	RequestPredicted, RequestConfirmed int
}

// DriftObserver is told a rank's drift after every request to it that
// had a predicted hit the engine's answer could check. The index-trust
// side consumes it; it must not block (it runs on the proxy's path).
type DriftObserver interface {
	ParityDrift(rank RankKey, d Drift)
}

// DriftFunc adapts a function to DriftObserver.
type DriftFunc func(rank RankKey, d Drift)

// ParityDrift calls f.
func (f DriftFunc) ParityDrift(rank RankKey, d Drift) { f(rank, d) }

// Mode is a model's tokenization.
type Mode string

const (
	ModeRouter Mode = "router"
	ModeEngine Mode = "engine"
)

// Tracker holds the windows. It is safe for concurrent use; it starts no
// goroutine.
type Tracker struct {
	cfg   Config
	drift DriftObserver

	mu        sync.Mutex
	models    map[string]*modelState
	ranks     map[RankKey]*rankState
	lastSweep time.Time
}

type modelState struct {
	window   ring
	breached bool
	mode     Mode
	// switchedAt and reason describe the last switch to engine mode.
	switchedAt time.Time
	reason     string
	clean      int // consecutive matching background checks (engine mode)
	requests   uint64
	mismatches uint64
}

type rankState struct {
	predicted, unconfirmed []int // ring buffers of Window entries
	next, n                int
	sumPred, sumUnconf     int
	last                   time.Time
	// reportsCached: the rank's engine has reported cached tokens.
	reportsCached bool
}

// New returns a tracker (drift may be nil).
func New(cfg Config, drift DriftObserver) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Tracker{cfg: cfg, drift: drift, models: map[string]*modelState{}, ranks: map[RankKey]*rankState{}}, nil
}

// Config returns the tracker's knobs.
func (t *Tracker) Config() Config { return t.cfg }

func (t *Tracker) model(name string) *modelState {
	m := t.models[name]
	if m == nil {
		m = &modelState{window: newRing(t.cfg.Window), mode: ModeRouter}
		t.models[name] = m
	}
	return m
}

// Mode returns a model's current tokenization.
func (t *Tracker) Mode(model string) Mode {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.models[model]; m != nil {
		return m.mode
	}
	return ModeRouter
}

// Observe records one request answered with usage.
func (t *Tracker) Observe(now time.Time, o Observation) Result {
	t.mu.Lock()
	res, drift, key, report := t.observeLocked(now, o)
	t.mu.Unlock()
	if report && t.drift != nil {
		t.drift.ParityDrift(key, drift)
	}
	return res
}

func (t *Tracker) observeLocked(now time.Time, o Observation) (Result, Drift, RankKey, bool) {
	var res Result
	m := t.model(o.Model)
	res.Mismatch = o.RouterTokens != o.Usage.PromptTokens
	m.requests++
	if res.Mismatch {
		m.mismatches++
	}
	// judged: the request went into the window (the ratio reported is
	// the window's before a switch resets it).
	judged := o.Source == SourceRouter && m.mode == ModeRouter
	if judged {
		m.window.push(res.Mismatch)
		over := m.window.n >= t.cfg.MinSamples && m.window.fraction() > t.cfg.MismatchThreshold
		res.Ratio = 1 - m.window.fraction()
		if over && !m.breached {
			res.Breached = true
			if t.cfg.AutoSwitch {
				res.Switched = true
				m.mode, m.switchedAt, m.clean = ModeEngine, now, 0
				m.reason = "token_mismatch"
				m.window.reset()
			}
		}
		m.breached = over && !res.Switched
	}
	if !judged {
		res.Ratio = 1 - m.window.fraction()
	}
	t.sweepRanks(now)
	if !o.HasPrediction {
		return res, Drift{}, RankKey{}, false
	}
	key := RankKey{o.Worker, o.DpRank}
	r := t.ranks[key]
	if r == nil {
		r = &rankState{predicted: make([]int, t.cfg.Window), unconfirmed: make([]int, t.cfg.Window)}
		t.ranks[key] = r
	}
	r.last = now
	cached, has := o.Usage.CachedTokens, o.Usage.HasCached
	if has {
		r.reportsCached = true
	} else if r.reportsCached {
		// SGLang (--enable-cache-report) leaves prompt_tokens_details
		// out when nothing was cached: from a rank that reported cached
		// tokens before, absence is zero.
		cached, has = 0, true
	}
	if !has {
		return res, Drift{}, RankKey{}, false
	}
	res.CacheCompared = true
	res.Predicted = capHit(o.PredictedCachedTokens, o.RouterTokens, o.Usage.PromptTokens)
	res.Confirmed = cached
	res.Unconfirmed = max(res.Predicted-res.Confirmed, 0)
	if res.Predicted == 0 {
		return res, Drift{}, RankKey{}, false
	}
	r.push(res.Predicted, res.Unconfirmed)
	d := r.drift(now)
	d.RequestPredicted, d.RequestConfirmed = res.Predicted, res.Confirmed
	return res, d, key, true
}

// capHit caps a predicted hit as engines cap theirs: the prompt's last
// token is always computed (vLLM's max_cache_hit_length = num_tokens - 1),
// so a prompt of n tokens can hit at most n-1 of them. The tighter of the
// router's and the engine's counts applies.
func capHit(predicted, routerTokens, engineTokens int) int {
	limit := min(routerTokens, engineTokens) - 1
	return max(min(predicted, limit), 0)
}

// sweepRanks drops ranks idle for RankIdle, at most once a minute.
func (t *Tracker) sweepRanks(now time.Time) {
	if now.Sub(t.lastSweep) < time.Minute {
		return
	}
	t.lastSweep = now
	for k, r := range t.ranks {
		if now.Sub(r.last) > t.cfg.RankIdle {
			delete(t.ranks, k)
		}
	}
}

// Check records a background check of a model in engine mode: the
// router's own tokenization of a served request against the engine's
// prompt_tokens. It returns true when the check completes a clean window
// and the model goes back to router tokenization.
func (t *Tracker) Check(now time.Time, model string, routerTokens, enginePromptTokens int) (switchedBack bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.models[model]
	if m == nil || m.mode != ModeEngine {
		return false
	}
	if routerTokens != enginePromptTokens {
		m.clean = 0
		return false
	}
	m.clean++
	if t.cfg.CleanWindow > 0 && m.clean >= t.cfg.CleanWindow {
		m.toRouter()
		return true
	}
	return false
}

// Reset is the operator's switch back: the model returns to router
// tokenization with an empty window. It reports whether it was in engine
// mode.
func (t *Tracker) Reset(model string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.models[model]
	if m == nil {
		return false
	}
	was := m.mode == ModeEngine
	m.toRouter()
	return was
}

func (m *modelState) toRouter() {
	m.mode, m.clean, m.breached, m.reason = ModeRouter, 0, false, ""
	m.switchedAt = time.Time{}
	m.window.reset()
}

// ModelStatus is a model's parity as status and /v1/models show it.
type ModelStatus struct {
	Model        string     `json:"model"`
	Tokenization Mode       `json:"tokenization"`
	SwitchedAt   *time.Time `json:"switched_at,omitempty"`
	Reason       string     `json:"reason,omitempty"`
	// WindowRequests and WindowMismatches describe the current window;
	// ParityRatio is the fraction that matched (1 for an empty window).
	WindowRequests   int     `json:"window_requests"`
	WindowMismatches int     `json:"window_mismatches"`
	ParityRatio      float64 `json:"parity_ratio"`
	CleanChecks      int     `json:"clean_checks,omitempty"`
	Requests         uint64  `json:"requests"`
	Mismatches       uint64  `json:"mismatches"`
}

// RankStatus is a rank's drift.
type RankStatus struct {
	WorkerID          uint64  `json:"worker_id"`
	DpRank            uint32  `json:"dp_rank"`
	Samples           int     `json:"samples"`
	PredictedTokens   int     `json:"predicted_cached_tokens"`
	UnconfirmedTokens int     `json:"unconfirmed_cached_tokens"`
	UnconfirmedRate   float64 `json:"unconfirmed_rate"`
}

// Status is the tracker's state, models and ranks sorted.
type Status struct {
	Models []ModelStatus `json:"models"`
	Ranks  []RankStatus  `json:"ranks"`
}

// ModelStatus returns one model's status (ok false: never seen).
func (t *Tracker) ModelStatus(model string) (ModelStatus, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.models[model]
	if m == nil {
		return ModelStatus{}, false
	}
	return m.status(model), true
}

func (m *modelState) status(name string) ModelStatus {
	s := ModelStatus{
		Model: name, Tokenization: m.mode, Reason: m.reason, WindowRequests: m.window.n,
		WindowMismatches: m.window.count, ParityRatio: 1 - m.window.fraction(), CleanChecks: m.clean,
		Requests: m.requests, Mismatches: m.mismatches,
	}
	if !m.switchedAt.IsZero() {
		at := m.switchedAt
		s.SwitchedAt = &at
	}
	return s
}

// Status returns every model's and rank's state.
func (t *Tracker) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := Status{Models: []ModelStatus{}, Ranks: []RankStatus{}}
	for name, m := range t.models {
		st.Models = append(st.Models, m.status(name))
	}
	sort.Slice(st.Models, func(i, j int) bool { return st.Models[i].Model < st.Models[j].Model })
	for k, r := range t.ranks {
		d := r.drift(time.Time{})
		st.Ranks = append(st.Ranks, RankStatus{WorkerID: k.Worker, DpRank: k.DpRank, Samples: d.Samples,
			PredictedTokens: d.PredictedTokens, UnconfirmedTokens: d.UnconfirmedTokens, UnconfirmedRate: d.Rate})
	}
	sort.Slice(st.Ranks, func(i, j int) bool {
		a, b := st.Ranks[i], st.Ranks[j]
		return a.WorkerID < b.WorkerID || a.WorkerID == b.WorkerID && a.DpRank < b.DpRank
	})
	return st
}

// RankDrift returns a rank's drift (ok false: no window).
func (t *Tracker) RankDrift(k RankKey) (Drift, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.ranks[k]
	if r == nil {
		return Drift{}, false
	}
	return r.drift(r.last), true
}

// ring is a window of booleans with a running count of true ones.
type ring struct {
	buf     []bool
	next, n int
	count   int
}

func newRing(size int) ring { return ring{buf: make([]bool, size)} }

func (r *ring) push(v bool) {
	if r.n == len(r.buf) {
		if r.buf[r.next] {
			r.count--
		}
	} else {
		r.n++
	}
	r.buf[r.next] = v
	if v {
		r.count++
	}
	r.next = (r.next + 1) % len(r.buf)
}

func (r *ring) fraction() float64 {
	if r.n == 0 {
		return 0
	}
	return float64(r.count) / float64(r.n)
}

func (r *ring) reset() {
	clear(r.buf)
	r.next, r.n, r.count = 0, 0, 0
}

func (r *rankState) push(pred, unconf int) {
	if r.n == len(r.predicted) {
		r.sumPred -= r.predicted[r.next]
		r.sumUnconf -= r.unconfirmed[r.next]
	} else {
		r.n++
	}
	r.predicted[r.next], r.unconfirmed[r.next] = pred, unconf
	r.sumPred += pred
	r.sumUnconf += unconf
	r.next = (r.next + 1) % len(r.predicted)
}

func (r *rankState) drift(now time.Time) Drift {
	d := Drift{Samples: r.n, PredictedTokens: r.sumPred, UnconfirmedTokens: r.sumUnconf, At: now}
	if r.sumPred > 0 {
		d.Rate = float64(r.sumUnconf) / float64(r.sumPred)
	}
	return d
}
