package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// fleet records what the Manager does to the registry.
type fleet struct {
	mu     sync.Mutex
	calls  []string
	refuse map[kv.WorkerID]bool
}

func (f *fleet) Register(_ context.Context, r Record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse[r.ID] {
		f.calls = append(f.calls, fmt.Sprintf("refused %s", r.Name))
		return errors.New("refused")
	}
	f.calls = append(f.calls, fmt.Sprintf("register %s", r.Name))
	return nil
}

func (f *fleet) SetCondition(_ context.Context, id kv.WorkerID, cond kv.WorkerState, on bool, ranks []uint32, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := fmt.Sprintf("%s %v %d", cond, on, id)
	if len(ranks) > 0 {
		s += fmt.Sprint(" ", ranks)
	}
	f.calls = append(f.calls, s)
	return nil
}

func (f *fleet) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

func TestManager(t *testing.T) {
	f := &fleet{refuse: map[kv.WorkerID]bool{}}
	// Updates go straight to the apply loop, in order with Flush.
	m := NewManager(f, nil, slog.New(slog.DiscardHandler))
	src := struct{ ch chan<- any }{m.events}
	m.Start()
	defer m.Close()
	a, b := rec("1", true), rec("2", false)
	expect := func(what string, want ...string) {
		t.Helper()
		m.Flush()
		if got := f.take(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got  %q\n want %q", what, got, want)
		}
	}
	order := func(x, y Record) (Record, Record) {
		if x.ID > y.ID {
			return y, x
		}
		return x, y
	}
	src.ch <- Update{Source: "test://", Records: []Record{a, b}}
	first, second := order(a, b)
	var want []string
	for _, r := range []Record{first, second} {
		want = append(want, "register "+r.Name, fmt.Sprintf("draining false %d", r.ID), fmt.Sprintf("unhealthy %v %d", !r.Ready, r.ID))
	}
	expect("two engines, one not ready", want...)
	if got := m.Engines(); len(got) != 2 {
		t.Fatalf("engines %v", got)
	}

	// Health: unhealthy while the pod is not Ready OR its checks fail.
	m.Health(a.ID, Health{Healthy: false, Reason: "HTTP 503"})
	expect("a fails its health check", fmt.Sprintf("unhealthy true %d", a.ID))
	m.Health(b.ID, Health{Healthy: true})
	expect("b passes, but its pod is not Ready: nothing changes")
	bReady := b
	bReady.Ready = true
	src.ch <- Update{Source: "test://", Records: []Record{a, bReady}}
	expect("b Ready", fmt.Sprintf("unhealthy false %d", b.ID))
	m.Health(a.ID, Health{Healthy: true, BusyChanged: true, BusyRanks: []uint32{0}})
	expect("a healthy and busy", fmt.Sprintf("unhealthy false %d", a.ID), fmt.Sprintf("busy true %d [0]", a.ID))
	m.Health(a.ID, Health{Healthy: true, BusyChanged: true})
	expect("a idle", fmt.Sprintf("busy false %d", a.ID))

	// b leaves: drained; comes back: registered and undrained.
	src.ch <- Update{Source: "test://", Records: []Record{a}}
	expect("b gone", fmt.Sprintf("draining true %d", b.ID))
	src.ch <- Update{Source: "test://", Records: []Record{a, bReady}}
	expect("b back", "register "+b.Name, fmt.Sprintf("draining false %d", b.ID), fmt.Sprintf("unhealthy false %d", b.ID))

	// A refused registration is retried (here: by the next change).
	c := rec("3", true)
	f.mu.Lock()
	f.refuse[c.ID] = true
	f.mu.Unlock()
	src.ch <- Update{Source: "test://", Records: []Record{a, bReady, c}}
	expect("c refused", "refused "+c.Name)
	if s := m.Stats(); s.Rejected != 1 || s.Drained != 1 || s.Registered != 3 {
		t.Fatalf("stats %+v", s)
	}
	f.mu.Lock()
	delete(f.refuse, c.ID)
	f.mu.Unlock()
	m.retry(context.Background()) // the apply loop's retry tick (called directly: no other goroutine touches pending now)
	if got := f.take(); !slices.Contains(got, "register "+c.Name) {
		t.Fatalf("retry: %q", got)
	}
}

// Source errors are counted and keep the fleet; a working look is
// logged once after them.
func TestManagerSourceErrors(t *testing.T) {
	f := &fleet{}
	m := NewManager(f, nil, slog.New(slog.DiscardHandler))
	m.Start()
	defer m.Close()
	m.events <- Update{Source: "dns://x", Records: []Record{rec("1", true)}}
	for range 3 {
		m.events <- Update{Source: "dns://x", Err: &ReasonError{Reason: "dns_unreachable", Err: errors.New("timeout")}}
	}
	m.events <- Update{Source: "k8s://y", Err: &ReasonError{Reason: "forbidden", Err: errors.New("no")}}
	m.Flush()
	s := m.Stats()
	if s.Errors["dns_unreachable"] != 3 || s.Errors["forbidden"] != 1 || s.Drained != 0 || len(m.Engines()) != 1 {
		t.Fatalf("stats %+v, engines %v", s, m.Engines())
	}
}

// After Close, verdicts and flushes return at once: an engine poller
// stopping later never blocks on a stopped manager.
func TestManagerClosed(t *testing.T) {
	m := NewManager(&fleet{}, nil, slog.New(slog.DiscardHandler))
	m.Start()
	m.Close()
	done := make(chan struct{})
	go func() {
		for range 2000 { // more than the events buffer
			m.Health(1, Health{Healthy: false})
		}
		m.Flush()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Health blocked after Close")
	}
}
