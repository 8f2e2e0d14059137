package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/messages"
)

// holder is a map-based Sink standing in for the router: it holds every
// origin's requests, this replica's own included (applied with local).
type holder struct {
	self string

	mu      sync.Mutex
	origins map[string]map[string]*heldRequest
	drops   map[string]time.Time // origin → first DropOrigin
	applied map[string]int       // origin → ApplyRemote calls
	lose    map[string]int       // origin → next ApplyRemote calls to discard
	onApply func(ev *messages.SequenceEvent, at time.Time)
}

type heldRequest struct {
	add         *messages.AddRequest
	prefillDone bool
}

func newHolder(self string) *holder {
	return &holder{
		self: self, origins: map[string]map[string]*heldRequest{},
		drops: map[string]time.Time{}, applied: map[string]int{}, lose: map[string]int{},
	}
}

// apply is the holder semantics shared by local and remote events.
func (h *holder) applyLocked(origin string, ev *messages.SequenceEvent) {
	reqs := h.origins[origin]
	if reqs == nil {
		reqs = map[string]*heldRequest{}
		h.origins[origin] = reqs
	}
	switch {
	case ev.GetAdd() != nil:
		if _, dup := reqs[ev.GetAdd().GetRequestId()]; !dup {
			reqs[ev.GetAdd().GetRequestId()] = &heldRequest{add: ev.GetAdd()}
		}
	case ev.GetPrefillCompleted() != nil:
		if r := reqs[ev.GetPrefillCompleted().GetRequestId()]; r != nil {
			r.prefillDone = true
		}
	case ev.GetFree() != nil:
		delete(reqs, ev.GetFree().GetRequestId())
	}
}

// local records one of this replica's own decisions, then publishes it,
// in the order the router does.
func (h *holder) local(n *Node, ev *messages.SequenceEvent) error {
	h.mu.Lock()
	h.applyLocked(h.self, ev)
	h.mu.Unlock()
	return n.Publish(ev)
}

func (h *holder) ApplyRemote(ev *messages.SequenceEvent) {
	at := time.Now()
	h.mu.Lock()
	h.applied[ev.GetOrigin()]++
	if h.lose[ev.GetOrigin()] > 0 {
		h.lose[ev.GetOrigin()]--
		h.mu.Unlock()
		return
	}
	h.applyLocked(ev.GetOrigin(), ev)
	onApply := h.onApply
	h.mu.Unlock()
	if onApply != nil {
		onApply(ev, at)
	}
}

func (h *holder) DropOrigin(origin string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.origins, origin)
	if _, seen := h.drops[origin]; !seen {
		h.drops[origin] = time.Now()
	}
}

func (h *holder) ReplaceOrigin(origin string, evs []*messages.SequenceEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.origins, origin)
	for _, ev := range evs {
		h.applyLocked(origin, ev)
	}
}

func (h *holder) OriginDigest(_ context.Context, origin string) (Digest, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var d Digest
	for id, r := range h.origins[origin] {
		d.Add(id, r.prefillDone)
	}
	return d, nil
}

func (h *holder) OwnedRequests(context.Context) ([]*messages.SequenceEvent, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*messages.SequenceEvent
	for id, r := range h.origins[h.self] {
		out = append(out, &messages.SequenceEvent{Data: &messages.SequenceEvent_Add{Add: r.add}})
		if r.prefillDone {
			out = append(out, prefillEvent(id))
		}
	}
	return out, nil
}

// view returns origin's requests as id → prefill done.
func (h *holder) view(origin string) map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]bool{}
	for id, r := range h.origins[origin] {
		out[id] = r.prefillDone
	}
	return out
}

func (h *holder) dropTime(origin string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.drops[origin]
	return t, ok
}

func (h *holder) appliedFrom(origin string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.applied[origin]
}

func (h *holder) loseNext(origin string, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lose[origin] += n
}

func (h *holder) setOnApply(f func(ev *messages.SequenceEvent, at time.Time)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onApply = f
}

func addEvent(id string, hashes ...uint64) *messages.SequenceEvent {
	return &messages.SequenceEvent{Data: &messages.SequenceEvent_Add{Add: &messages.AddRequest{
		RequestId: id, Worker: &messages.WorkerRank{WorkerId: 7, DpRank: 1},
		SequenceHashes: hashes, PrefillTokens: 512, Isl: 1024, TrackPrefillTokens: true,
	}}}
}

func prefillEvent(id string) *messages.SequenceEvent {
	return &messages.SequenceEvent{Data: &messages.SequenceEvent_PrefillCompleted{
		PrefillCompleted: &messages.MarkPrefillCompleted{RequestId: id}}}
}

func freeEvent(id string) *messages.SequenceEvent {
	return &messages.SequenceEvent{Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: id}}}
}
