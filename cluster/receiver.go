package cluster

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/messages"
)

// maxRepairLog bounds the events remembered while a full state is awaited;
// a longer wait abandons the repair (the next digest retries).
const maxRepairLog = 1 << 17

// originState is the apply loop's view of one peer's stream.
type originState struct {
	name   string
	epoch  uint64 // memberEntry.epoch this state belongs to
	buf    reorderBuffer
	digest *digestMsg // received digest waiting for its Seq to be applied
	repair *repairState
}

// repairState is a full-state request in flight. Events applied meanwhile
// are logged: the snapshot may predate some of them, so they are replayed
// after ReplaceOrigin.
type repairState struct {
	nonce   uint64
	started time.Time
	log     []*messages.SequenceEvent
}

// receiver decodes peers' messages and drives the Sink one message at a
// time, so every origin's events reach the Sink in order. mu serialises
// it: frames from the persistent streams are handled on their reader
// goroutine (no hand-off per batch), memberlist's fallback messages and
// the housekeeping ticks on the apply goroutine.
type receiver struct {
	mu      sync.Mutex
	n       *Node
	origins map[string]*originState
	nonce   uint64
	scratch []*messages.SequenceEvent
	// watching is set while a gap or a repair is outstanding: runApply
	// then checks their deadlines every GapTimeout/2. Otherwise its
	// housekeeping (forgetting departed origins) runs once per idleHousekeep.
	watching bool
	wake     chan struct{} // capacity 1: tells runApply that watching was set
}

// idleHousekeep is the receiver's housekeeping period with no gap or repair
// outstanding. Checking every GapTimeout/2 regardless woke the apply loop
// 20 times a second on every idle replica.
const idleHousekeep = time.Second

func newReceiver(n *Node) *receiver {
	return &receiver{n: n, origins: make(map[string]*originState), wake: make(chan struct{}, 1)}
}

// receive handles one message under the receiver's lock. from is the
// member that sent it (an authenticated stream's), or "" for memberlist's
// paths, whose messages must then be signed by a member. buf is not
// retained.
func (r *receiver) receive(buf []byte, from string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handle(buf, from, time.Now())
	if !r.watching && r.deadlinesPending() {
		r.watching = true
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// deadlinesPending reports whether some origin has a gap or a repair whose
// timeout must be watched. Called with mu held; a replica has few peers.
func (r *receiver) deadlinesPending() bool {
	for _, st := range r.origins {
		if st.repair != nil || st.buf.waiting() {
			return true
		}
	}
	return false
}

// runApply handles memberlist's messages (the inbox) and the gap and
// repair timeouts.
func (n *Node) runApply() {
	defer n.wg.Done()
	fast := max(n.cfg.GapTimeout/2, time.Millisecond)
	slow := max(fast, idleHousekeep)
	t := time.NewTimer(slow)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case buf := <-n.inbox:
			n.recv.receive(buf, "")
		case <-n.recv.wake:
			// A gap or repair began: watch its deadline. (A wake comes only
			// after a tick cleared watching, so it never postpones one.)
			t.Reset(fast)
		case now := <-t.C:
			r := n.recv
			r.mu.Lock()
			r.housekeep(now)
			r.watching = r.deadlinesPending()
			watching := r.watching // read under mu: receive sets it too
			r.mu.Unlock()
			if watching {
				t.Reset(fast)
			} else {
				t.Reset(slow)
			}
		}
	}
}

func (r *receiver) handle(buf []byte, from string, now time.Time) {
	if from == "" {
		sender, inner, err := r.n.verifySigned(buf)
		if err != nil {
			r.n.stats.unauthenticated.Add(1)
			r.n.log.Debug("dropped a message no member signed", "bytes", len(buf), "err", err)
			return
		}
		buf, from = inner, sender
	}
	f, err := decodeFrame(buf)
	if err != nil {
		r.n.stats.malformed.Add(1)
		r.n.log.Debug("dropped malformed message", "bytes", len(buf), "err", err)
		return
	}
	if !f.speaksFor(from) {
		// A member speaks only for itself: a frame with another origin's
		// events, digest, state or request is dropped whole.
		r.n.stats.foreignFrames.Add(1)
		r.n.log.Debug("dropped a frame speaking for another origin", "sender", from, "kind", f.kind)
		return
	}
	switch f.kind {
	case frameBatch:
		r.handleBatch(f.batch, now)
	case frameDigest:
		r.handleDigest(f.digest, now)
	case frameStateRequest:
		r.n.serveState(f.request)
	case frameStateReply:
		r.handleReply(f.reply, now)
	case frameSessionDigest, frameSessionRequest, frameSessionReply:
		r.n.sessions.offer(f)
	}
}

// verifySigned checks a memberlist-path message: signed by the boot key
// of the alive member it names. It returns that member and the frame.
func (n *Node) verifySigned(buf []byte) (from string, inner []byte, err error) {
	from, sig, inner, err := decodeSigned(buf)
	if err != nil {
		return "", nil, err
	}
	key, _, ok := n.memberStreamKey(from)
	if !ok {
		return "", nil, fmt.Errorf("%q is not a current member", from)
	}
	if !ed25519.Verify(key, frameSigMessage(n.cfg.Label, from, inner), sig) {
		return "", nil, fmt.Errorf("signature of %q does not verify", from)
	}
	return from, inner, nil
}

// state returns origin's state, fresh if the origin rejoined since, or nil
// if it departed.
func (r *receiver) state(origin string) *originState {
	alive, epoch := r.n.originStatus(origin)
	if !alive {
		return nil
	}
	st := r.origins[origin]
	if st == nil || st.epoch != epoch {
		st = &originState{name: origin, epoch: epoch}
		r.origins[origin] = st
	}
	return st
}

// validRemote checks a peer's event; own echoes are counted separately.
func (r *receiver) validRemote(ev *messages.SequenceEvent) bool {
	if _, err := eventRequestID(ev); err != nil || ev.GetOrigin() == "" || ev.GetSeq() == 0 {
		r.n.stats.malformed.Add(1)
		return false
	}
	if ev.GetOrigin() == r.n.cfg.ReplicaID {
		r.n.stats.echoesIgnored.Add(1)
		return false
	}
	if w, ok := sessionWriter(ev); ok && w != ev.GetOrigin() {
		// A replica writes session versions only in its own name.
		r.n.stats.foreignFrames.Add(1)
		return false
	}
	return true
}

func (r *receiver) handleBatch(evs []*messages.SequenceEvent, now time.Time) {
	for _, ev := range evs {
		if !r.validRemote(ev) {
			continue
		}
		st := r.state(ev.GetOrigin())
		if st == nil {
			r.n.stats.staleEvents.Add(1)
			continue
		}
		// Met mid-stream, an origin's events wait in the buffer until its
		// digest or the gap timeout settles where we start (see
		// reorderBuffer); housekeep then asks for the state we missed.
		ready, stale := st.buf.offer(ev, now, r.scratch[:0])
		if stale {
			r.n.stats.staleEvents.Add(1)
		}
		r.release(st, ready, now)
		r.scratch = ready[:0]
	}
}

// release hands in-order events to the Sink, checking a waiting digest
// after each one: that is the only moment our view and the digest describe
// the same Seq.
func (r *receiver) release(st *originState, evs []*messages.SequenceEvent, now time.Time) {
	defer clear(evs) // scratch slice: do not pin events
	bs, batched := r.n.sink.(BatchSink)
	for rest := evs; len(rest) > 0; {
		n := 1
		if batched {
			// A run ends at a pending digest's Seq, so the digest is
			// compared exactly where the origin computed it.
			n = len(rest)
			if d := st.digest; d != nil {
				for i, ev := range rest {
					if ev.GetSeq() == d.Seq {
						n = i + 1
						break
					}
				}
			}
		}
		run := rest[:n]
		rest = rest[n:]
		ok := r.n.withOrigin(st.name, st.epoch, func() {
			if batched {
				bs.ApplyRemoteBatch(run)
			} else {
				r.n.sink.ApplyRemote(run[0])
			}
		})
		if !ok {
			return
		}
		r.n.stats.eventsReceived.Add(uint64(len(run)))
		if rp := st.repair; rp != nil {
			if len(rp.log)+len(run) > maxRepairLog {
				st.repair = nil
				r.n.stats.repairsAbandoned.Add(1)
			} else {
				rp.log = append(rp.log, run...)
			}
		}
		r.checkDigest(st, now)
	}
}

func (r *receiver) checkDigest(st *originState, now time.Time) {
	d := st.digest
	if d == nil {
		return
	}
	applied := st.buf.applied()
	switch {
	case st.repair != nil || d.Seq < applied:
		st.digest = nil // a repair is coming anyway, or we went past it
	case d.Seq == applied:
		st.digest = nil
		r.compare(st, *d, now)
	}
}

func (r *receiver) handleDigest(d digestMsg, now time.Time) {
	if d.Origin == r.n.cfg.ReplicaID || d.Origin == "" {
		return
	}
	r.n.stats.digestsReceived.Add(1)
	r.n.checkRegistry(d, now)
	st := r.state(d.Origin)
	if st == nil || st.repair != nil {
		return
	}
	applied := st.buf.applied()
	switch {
	case !st.buf.started():
		// No event seen yet (an idle origin, or we just arrived): what we
		// hold must match it as it is, and it sets our baseline.
		if r.compare(st, d, now) {
			st.buf.reset(d.Seq, now)
			ready := st.buf.drain(r.scratch[:0])
			r.release(st, ready, now)
			r.scratch = ready[:0]
		}
	case d.Seq == applied:
		r.compare(st, d, now)
	case d.Seq > applied:
		st.digest = &d
		st.buf.know(d.Seq, now)
	}
	// d.Seq < applied: we are already past it; the next digest will do.
}

// compare checks the Sink's view of an origin against its digest, asking
// for a repair on a mismatch. It reports whether they matched.
func (r *receiver) compare(st *originState, d digestMsg, now time.Time) bool {
	ctx, cancel := context.WithTimeout(context.Background(), r.n.cfg.SinkTimeout)
	defer cancel()
	got, err := r.n.sink.OriginDigest(ctx, st.name)
	if err != nil {
		r.n.log.Warn("sink digest unavailable", "origin", st.name, "err", err)
		return false
	}
	if got == d.Digest {
		r.n.synced.mark(st.name)
		return true
	}
	r.n.stats.digestMismatches.Add(1)
	r.n.log.Debug("digest mismatch", "origin", st.name, "seq", d.Seq,
		"want_count", d.Digest.Count, "have_count", got.Count)
	r.requestRepair(st, now)
	return false
}

func (r *receiver) requestRepair(st *originState, now time.Time) {
	if st.repair != nil {
		return
	}
	p := r.n.senderFor(st.name)
	if p == nil {
		return // not a live member (yet): the next digest or event retries
	}
	r.nonce++
	req := encodeStateRequest(stateRequest{Requester: r.n.cfg.ReplicaID, Nonce: r.nonce})
	if !r.n.enqueue(p, outbound{buf: req, reliable: true}) {
		return
	}
	st.repair = &repairState{nonce: r.nonce, started: now}
	r.n.stats.repairRequests.Add(1)
}

func (r *receiver) handleReply(rep stateReply, now time.Time) {
	st := r.state(rep.Origin)
	if st == nil || st.repair == nil || st.repair.nonce != rep.Nonce {
		r.n.stats.staleEvents.Add(uint64(len(rep.Events)))
		return
	}
	evs := rep.Events[:0]
	for _, ev := range rep.Events {
		if ev.GetOrigin() == rep.Origin && r.validRemote(ev) {
			evs = append(evs, ev)
		} else if ev.GetOrigin() != rep.Origin {
			r.n.stats.malformed.Add(1)
		}
	}
	if !r.n.withOrigin(st.name, st.epoch, func() { r.n.sink.ReplaceOrigin(st.name, evs) }) {
		return
	}
	r.n.stats.repairs.Add(1)
	r.n.synced.mark(st.name)
	logged := st.repair.log
	st.repair = nil
	if st.buf.applied() >= rep.Seq && st.buf.started() {
		// The snapshot predates events we already applied: replay them.
		var replay []*messages.SequenceEvent
		for _, ev := range logged {
			if ev.GetSeq() > rep.Seq {
				replay = append(replay, ev)
			}
		}
		r.release(st, replay, now)
	} else {
		// The snapshot covers everything up to rep.Seq: jump there.
		st.buf.reset(rep.Seq, now)
		r.release(st, st.buf.drain(r.scratch[:0]), now)
	}
	if st.digest != nil && st.digest.Seq <= st.buf.applied() {
		st.digest = nil
	}
}

// housekeep forgets departed origins, abandons stuck repairs and gives up
// on gaps that did not fill in time.
func (r *receiver) housekeep(now time.Time) {
	for name, st := range r.origins {
		if alive, epoch := r.n.originStatus(name); !alive || epoch != st.epoch {
			delete(r.origins, name)
			continue
		}
		if st.repair != nil && now.Sub(st.repair.started) > r.n.cfg.RepairTimeout {
			st.repair = nil
			r.n.stats.repairsAbandoned.Add(1)
		}
		if st.buf.expired(now, r.n.cfg.GapTimeout) {
			ready, lost := st.buf.skip(now, r.scratch[:0])
			r.n.stats.eventsLost.Add(lost)
			r.n.log.Debug("gave up on missing events", "origin", name, "lost", lost)
			r.requestRepair(st, now)
			r.release(st, ready, now)
		}
	}
}

// serveState answers a peer's full-state request from a separate
// goroutine: OwnedRequests may block and the apply loop must not.
func (n *Node) serveState(req stateRequest) {
	select {
	case n.snapshots <- struct{}{}:
	default:
		return // busy: the requester times out and asks again
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { <-n.snapshots }()
		// Read before the snapshot: the Sink reflects at least every event
		// published up to here, so the reply covers Seq.
		seq := n.lastSeq()
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.SinkTimeout)
		defer cancel()
		owned, err := n.sink.OwnedRequests(ctx)
		if err != nil {
			n.log.Warn("cannot serve full state", "requester", req.Requester, "err", err)
			return
		}
		evs := make([]*messages.SequenceEvent, 0, len(owned))
		for _, ev := range owned {
			if _, err := eventRequestID(ev); err == nil {
				evs = append(evs, &messages.SequenceEvent{Origin: n.cfg.ReplicaID, Seq: seq, Data: ev.Data})
			}
		}
		buf, err := encodeStateReply(stateReply{Origin: n.cfg.ReplicaID, Nonce: req.Nonce, Seq: seq, Events: evs})
		if err != nil {
			n.log.Error("cannot encode full state", "err", err)
			return
		}
		if p := n.senderFor(req.Requester); p != nil && n.enqueue(p, outbound{buf: buf, reliable: true}) {
			n.stats.stateReplies.Add(1)
		}
	}()
}
