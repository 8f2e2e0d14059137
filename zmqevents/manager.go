package zmqevents

import (
	"context"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/redial"

	"github.com/kvrouter/kvrouter/kv"
)

// Manager keeps one Subscriber per registered worker, typically driven by
// worker heartbeats that announce a kv_events_endpoint.
type Manager struct {
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	subs   map[kv.WorkerID]*Subscriber
	gone   Stats // counters of removed subscribers, so totals never go back
	closed bool
}

// Defaults of the connection-rate cap a Manager's subscribers share: a
// router starting against a few hundred ranks dials them at once, and a
// fleet of publishers that all drop connections is redialled at most this
// fast, whatever each rank's backoff.
const (
	DefaultConnectRate  = 50
	DefaultConnectBurst = 200
)

// NewManager returns a manager whose subscribers deliver with opts. They
// share opts.Limiter (default: DefaultConnectRate a second, bursts of
// DefaultConnectBurst) and opts.Waits.
func NewManager(opts Options) (*Manager, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.Limiter == nil {
		opts.Limiter = redial.NewLimiter(DefaultConnectRate, DefaultConnectBurst, nil)
	}
	if opts.Waits == nil {
		opts.Waits = &redial.Waits{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{opts: opts, ctx: ctx, cancel: cancel, subs: make(map[kv.WorkerID]*Subscriber)}, nil
}

// Ensure makes sure the worker is subscribed with exactly cfg: nothing
// happens when it already is, a changed endpoint replaces the old
// subscriber. It reports whether a subscriber was started.
func (m *Manager) Ensure(cfg WorkerEndpoint) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false, ErrClosed
	}
	old := m.subs[cfg.WorkerID]
	if old != nil && old.Endpoint() == cfg {
		return false, nil
	}
	if old != nil {
		m.stopLocked(cfg.WorkerID, old)
	}
	s, err := StartSubscriber(m.ctx, cfg, m.opts)
	if err != nil {
		return false, err
	}
	m.subs[cfg.WorkerID] = s
	return true, nil
}

// Remove stops the worker's subscriber, if any, and reports whether there
// was one. The caller removes the worker from its index.
func (m *Manager) Remove(id kv.WorkerID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.subs[id]
	if s == nil {
		return false
	}
	m.stopLocked(id, s)
	return true
}

func (m *Manager) stopLocked(id kv.WorkerID, s *Subscriber) {
	_ = s.Close() // Subscriber.Close never fails (it returns an error for io.Closer)
	m.gone.add(s.Stats())
	delete(m.subs, id)
}

// Workers returns the subscribed workers.
func (m *Manager) Workers() []kv.WorkerID {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]kv.WorkerID, 0, len(m.subs))
	for id := range m.subs {
		out = append(out, id)
	}
	return out
}

// Stats sums the counters of every subscriber, past and present.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	total := m.gone
	for _, s := range m.subs {
		total.add(s.Stats())
	}
	return total
}

// Backoff is the longest reconnect backoff a rank is waiting out (0: none)
// and how many ranks are in one.
func (m *Manager) Backoff() (time.Duration, int) {
	return m.opts.Waits.Max(), m.opts.Waits.Waiting()
}

// Close stops every subscriber; later Ensure calls fail with ErrClosed.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	for id, s := range m.subs {
		m.stopLocked(id, s)
	}
	m.cancel()
	return nil
}
