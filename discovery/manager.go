package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// Fleet is what the Manager drives: the replica's registry and ZMQ
// subscriptions.
type Fleet interface {
	// Register registers (or refreshes) a discovered engine as a worker
	// that never expires, and subscribes to its KV events. An error is a
	// refusal (policy, block size, registry full): retried later.
	Register(ctx context.Context, r Record) error
	// SetCondition sets or clears a worker's condition (kv.WorkerBusy,
	// kv.WorkerUnhealthy, kv.WorkerDraining).
	SetCondition(ctx context.Context, id kv.WorkerID, cond kv.WorkerState, on bool, ranks []uint32, reason string) error
}

// Health is an engine poller's verdict (enginepoll.Change) as the
// Manager takes it.
type Health struct {
	Healthy bool
	Reason  string
	// BusyChanged: BusyRanks (the busy dp ranks, none = not busy) is new.
	BusyChanged bool
	BusyRanks   []uint32
}

// Manager runs the sources, reconciles their views into the fleet and
// folds the engine poller's verdicts in: a worker is unhealthy while its
// pod is not Ready or its health check fails. Everything is applied on
// one goroutine, in order.
type Manager struct {
	fleet   Fleet
	sources []Source
	log     *slog.Logger
	errs    *errorLog

	events chan any // Update or healthEvent
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Owned by the apply loop.
	rec      *Reconciler
	pending  map[kv.WorkerID]Record // registrations refused, retried
	notReady map[kv.WorkerID]bool
	pollBad  map[kv.WorkerID]string // failing health checks: reason
	told     map[kv.WorkerID]bool   // unhealthy as last set in the fleet

	mu      sync.Mutex
	engines []Record // what the sources see, for Engines

	updates, registered, drained, notReadyN, rejected atomic.Uint64
}

type healthEvent struct {
	id kv.WorkerID
	h  Health
}

// retryEvery is how often refused registrations are tried again.
const retryEvery = 10 * time.Second

// NewManager returns a manager over the sources (none: it only folds in
// health verdicts).
func NewManager(fleet Fleet, sources []Source, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "discovery")
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{fleet: fleet, sources: sources, log: log, errs: newErrorLog(log),
		events: make(chan any, 1024), ctx: ctx, cancel: cancel, rec: NewReconciler(), pending: map[kv.WorkerID]Record{},
		notReady: map[kv.WorkerID]bool{}, pollBad: map[kv.WorkerID]string{}, told: map[kv.WorkerID]bool{}}
}

// Start runs the sources and the apply loop until Close.
func (m *Manager) Start() {
	ctx := m.ctx
	m.wg.Go(func() { m.loop(ctx) })
	for _, s := range m.sources {
		m.log.Info("discovery source started", "source", s.Name())
		m.wg.Go(func() {
			s.Run(ctx, func(u Update) {
				select {
				case m.events <- u:
				case <-ctx.Done():
				}
			})
		})
	}
}

// Close stops the sources and the apply loop. What was registered stays.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// Health hands over an engine poller's verdict (it may block briefly
// while the apply loop is busy; after Close it is dropped).
func (m *Manager) Health(id kv.WorkerID, h Health) {
	select {
	case m.events <- healthEvent{id, h}:
	case <-m.ctx.Done():
	}
}

// Flush waits until everything handed to the manager before was applied
// (or the manager is closed).
func (m *Manager) Flush() {
	done := make(chan struct{})
	select {
	case m.events <- done:
	case <-m.ctx.Done():
		return
	}
	select {
	case <-done:
	case <-m.ctx.Done():
	}
}

// Engines lists the engines the sources see, sorted by id.
func (m *Manager) Engines() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.engines
}

// Stats returns the discovery counters.
func (m *Manager) Stats() Stats {
	return Stats{Updates: m.updates.Load(), Errors: m.errs.snapshot(), Registered: m.registered.Load(),
		Drained: m.drained.Load(), NotReady: m.notReadyN.Load(), Rejected: m.rejected.Load()}
}

func (m *Manager) loop(ctx context.Context) {
	retry := time.NewTicker(retryEvery)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
			m.retry(ctx)
		case ev := <-m.events:
			switch ev := ev.(type) {
			case Update:
				m.update(ctx, ev)
			case healthEvent:
				m.health(ctx, ev.id, ev.h)
			case chan struct{}: // flush: everything sent before is applied
				close(ev)
			}
		}
	}
}

func (m *Manager) update(ctx context.Context, u Update) {
	m.updates.Add(1)
	if u.Err != nil {
		m.errs.fail(u.Source, reasonOf(u.Err), u.Err)
		return
	}
	m.errs.ok(u.Source)
	for _, w := range u.Warnings {
		m.errs.fail(u.Source, "bad_record", w)
	}
	p := m.rec.Apply(u)
	m.apply(ctx, p)
	m.mu.Lock()
	m.engines = m.rec.Records()
	m.mu.Unlock()
}

// apply carries a plan out: registrations first (with their readiness),
// then drains.
func (m *Manager) apply(ctx context.Context, p Plan) {
	for _, r := range p.Register {
		delete(m.pending, r.ID)
		m.notReady[r.ID] = !r.Ready
		m.register(ctx, r)
	}
	for _, id := range p.Ready {
		m.notReady[id] = false
		m.setUnhealthy(ctx, id)
	}
	for _, id := range p.NotReady {
		m.notReady[id] = true
		m.notReadyN.Add(1)
		m.setUnhealthy(ctx, id)
	}
	for _, id := range p.Drain {
		delete(m.pending, id)
		delete(m.notReady, id)
		delete(m.pollBad, id)
		delete(m.told, id)
		m.drained.Add(1)
		if err := m.fleet.SetCondition(ctx, id, kv.WorkerDraining, true, nil, "gone from discovery"); err != nil {
			m.log.Warn("cannot drain a worker", "worker", id, "err", err)
		}
	}
}

// register registers an engine, ends any drain and sets its health; a
// refusal leaves it pending for the next retry.
func (m *Manager) register(ctx context.Context, r Record) {
	if err := m.fleet.Register(ctx, r); err != nil {
		m.pending[r.ID] = r
		m.rejected.Add(1)
		return
	}
	m.registered.Add(1)
	m.log.Info("discovered engine registered", "worker", r.ID, "name", r.Name, "url", r.URL, "dp_size", r.DPSize,
		"kv_events", r.KVEventsEndpoint, "ready", r.Ready)
	if err := m.fleet.SetCondition(ctx, r.ID, kv.WorkerDraining, false, nil, "discovered again"); err != nil {
		m.log.Warn("cannot end a worker's drain", "worker", r.ID, "err", err)
	}
	delete(m.told, r.ID) // a fresh registration starts healthy: tell it
	m.setUnhealthy(ctx, r.ID)
}

func (m *Manager) retry(ctx context.Context) {
	for id, r := range m.pending {
		if m.rec.Has(id) {
			delete(m.pending, id)
			m.register(ctx, r)
		}
	}
}

func (m *Manager) health(ctx context.Context, id kv.WorkerID, h Health) {
	if h.Healthy {
		delete(m.pollBad, id)
	} else {
		m.pollBad[id] = h.Reason
	}
	m.setUnhealthy(ctx, id)
	if !h.BusyChanged {
		return
	}
	if err := m.fleet.SetCondition(ctx, id, kv.WorkerBusy, len(h.BusyRanks) > 0, h.BusyRanks, "engine load"); err != nil {
		m.log.Warn("cannot set a worker's busy ranks", "worker", id, "err", err)
	}
}

// setUnhealthy tells the fleet whether a worker is unhealthy (pod not
// Ready, or failing health checks) when that changed.
func (m *Manager) setUnhealthy(ctx context.Context, id kv.WorkerID) {
	reason, bad := m.pollBad[id]
	if m.notReady[id] {
		reason, bad = "pod not Ready", true
	}
	if told, ok := m.told[id]; ok && told == bad {
		return
	}
	if !bad {
		reason = "healthy"
	}
	if err := m.fleet.SetCondition(ctx, id, kv.WorkerUnhealthy, bad, nil, reason); err != nil {
		m.log.Warn("cannot set a worker's health", "worker", id, "err", err)
		return
	}
	m.told[id] = bad
}

// String describes the manager's sources.
func (m *Manager) String() string { return fmt.Sprintf("discovery over %d sources", len(m.sources)) }
