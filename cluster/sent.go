package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/loglimit"
)

// ErrNotSent is returned by Sent when some live peer's sender did not hand
// over the events in time (the peer is slow or unreachable) or its queue
// dropped them. Events not dropped stay queued for the peer.
var ErrNotSent = errors.New("cluster: events not handed to every peer in time")

// Reasons a Sent call gave up on a peer, the source label of
// kvrouter_gossip_ack_timeouts_total.
const (
	SentTimeout       = "timeout"         // the peer's sender did not finish within AckTimeout
	SentPeerQueueFull = "peer_queue_full" // the peer's queue dropped a batch holding the events
	SentStalled       = "peer_stalled"    // an earlier call timed out on the peer and its sender has not moved since
)

// sentWaiters is how Sent calls learn that a peer's sender made progress:
// every progress closes ch (and replaces it) while anyone waits.
type sentWaiters struct {
	mu      sync.Mutex
	waiting int
	ch      chan struct{}
	// log rate-limits the line a timed-out wait logs, per peer.
	log loglimit.Keyed[string]
}

// wait returns the channel the next progress closes, and counts the
// caller as waiting until done is called.
func (w *sentWaiters) wait() (ch <-chan struct{}, done func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	w.waiting++
	return w.ch, func() {
		w.mu.Lock()
		w.waiting--
		w.mu.Unlock()
	}
}

// again returns the channel the next progress closes.
func (w *sentWaiters) again() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// wake tells every waiting Sent to look again. It costs a lock only while
// someone waits.
func (w *sentWaiters) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting == 0 || w.ch == nil {
		return
	}
	close(w.ch)
	w.ch = nil
}

// ackGap is the shortest time between two batches a Sent call asks for:
// a millisecond (Dynamo's batch interval), or BatchInterval if shorter.
// Batches more often would cost the peers a read and an apply per batch
// for little: a wait is at most this long behind the last batch.
func (c Config) ackGap() time.Duration { return min(c.BatchInterval, time.Millisecond) }

// ackTimeout bounds a Sent call: a few batch intervals (the batch holding
// the events may have just opened) and a write.
func (c Config) ackTimeout() time.Duration {
	if c.AckTimeout > 0 {
		return c.AckTimeout
	}
	return 4*c.BatchInterval + 20*time.Millisecond
}

// Sent waits until every event Publish accepted before the call has been
// handed to each live peer: written to the peer's stream, or given to
// memberlist's send, which returned. A replica that acknowledges a change
// to its client only after Sent returns cannot die with the change known
// only to itself: the kernel delivers what the write handed over.
//
// Sent asks the batcher to send the open batch now, unless a batch left
// less than a millisecond ago (or BatchInterval if shorter: then the
// batch leaves that long after the last one), so a Sent costs a write's
// time when gossip is quiet, at most a millisecond more under load, and
// batches leave at most once per millisecond while calls wait (Dynamo's
// batch interval). Sent gives up on a peer whose
// sender does not finish within AckTimeout (4 batch intervals and 20 ms
// by default), whose queue dropped the events, or that an earlier call
// gave up on and whose sender has not made progress since (so a peer that
// is down delays one call per AckTimeout, not every call): it returns
// ErrNotSent, counted by reason (Stats.AckGivenUp) and logged at most once
// a minute per peer. Without peers it returns at once.
func (n *Node) Sent(ctx context.Context) error {
	target := n.published.Load()
	peers := *n.peers.Load()
	if target == 0 || len(peers) == 0 {
		return nil
	}
	w := sentWait{n: n, peers: peers, target: target}
	if w.next() == nil {
		return w.err
	}
	n.stats.ackWaits.Add(1)
	ch, done := n.sentWaiters.wait()
	defer done()
	select {
	case n.urgent <- struct{}{}:
	default: // a request for an early batch is pending already
	}
	timer := time.NewTimer(n.cfg.ackTimeout())
	defer timer.Stop()
	for {
		p := w.next()
		if p == nil {
			return w.err
		}
		select {
		case <-ch:
			ch = n.sentWaiters.again()
		case <-p.quit: // departed: not waited for
		case <-n.stop:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for peers to take events: %w", context.Cause(ctx))
		case <-timer.C:
			for i := range peers {
				if w.waiting(i) {
					w.giveUp(i, SentTimeout)
				}
			}
			return w.err
		}
	}
}

// sentWait is one Sent call's view of its peers.
type sentWait struct {
	n      *Node
	peers  []*peerSender
	target uint64
	gaveUp []bool // by index in peers; allocated on the first give-up
	err    error
}

// next is a peer still to wait for, or nil.
func (w *sentWait) next() *peerSender {
	for i, p := range w.peers {
		if w.waiting(i) {
			return p
		}
	}
	return nil
}

// waiting reports whether peers[i] has yet to take the events up to
// target. A peer whose queue dropped them or whose sender is stalled is
// given up on instead.
func (w *sentWait) waiting(i int) bool {
	p := w.peers[i]
	if p.sent.Load() >= w.target || (w.gaveUp != nil && w.gaveUp[i]) {
		return false
	}
	select {
	case <-p.quit:
		return false
	default:
	}
	switch {
	case p.dropped.Load() >= w.target:
		w.giveUp(i, SentPeerQueueFull)
		return false
	case p.stalled.Load():
		w.giveUp(i, SentStalled)
		return false
	}
	return true
}

// giveUp stops waiting for peers[i], counts and logs it; a timeout marks
// the peer stalled until its sender makes progress.
func (w *sentWait) giveUp(i int, reason string) {
	n, p := w.n, w.peers[i]
	if w.gaveUp == nil {
		w.gaveUp = make([]bool, len(w.peers))
	}
	w.gaveUp[i] = true
	w.err = fmt.Errorf("%w: %s: %s", ErrNotSent, p.name, reason)
	switch reason {
	case SentTimeout:
		p.stalled.Store(true)
		n.stats.ackTimeouts.Add(1)
	case SentPeerQueueFull:
		n.stats.ackQueueFull.Add(1)
	case SentStalled:
		n.stats.ackStalled.Add(1)
	}
	if ok, _, suppressed := n.sentWaiters.log.Allow(p.name, time.Now()); ok {
		n.log.Warn("a peer did not take this replica's gossip in time: acknowledged frees reach it late, or not at all if its queue dropped them",
			"peer", p.name, "reason", reason, "seq", w.target, "peer_sent", p.sent.Load(),
			"timeout", n.cfg.ackTimeout(), "suppressed", suppressed)
	}
}

// handed records that p's sender handed over (or failed to send) the
// events up to seq, and wakes the Sent calls.
func (n *Node) handed(p *peerSender, seq uint64) {
	if seq == 0 {
		return
	}
	p.sent.Store(seq)
	p.stalled.Store(false)
	n.sentWaiters.wake()
}

// droppedFor records that p's queue dropped a batch of the events up to
// seq, and wakes the Sent calls.
func (n *Node) droppedFor(p *peerSender, seq uint64) {
	if seq == 0 {
		return
	}
	p.dropped.Store(seq)
	n.sentWaiters.wake()
}
