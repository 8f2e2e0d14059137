package cluster

import (
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/kvrouter/kvrouter/messages"
)

// outbound is one encoded message for one peer.
type outbound struct {
	buf []byte
	// reliable forces TCP (state requests and replies must not be lost to
	// a dropped packet); otherwise the size decides.
	reliable bool
	// done, when set, is closed once every message queued before it was
	// handed to memberlist (Leave's flush marker; buf is nil).
	done chan struct{}
	// seq, when set, is the last own event's Seq in buf (a batch): once
	// buf is handed over, Sent stops waiting for this peer up to seq.
	seq uint64
}

// peerSender owns the sends to one peer, so a slow or unreachable peer
// (a TCP dial waiting out TCPTimeout) delays nobody else.
type peerSender struct {
	name       string
	node       atomic.Pointer[memberlist.Node] // latest address, from join/update
	streamPort atomic.Int32                    // from the peer's metadata
	conn       net.Conn                        // persistent stream; sender goroutine only
	redialAt   time.Time                       // no dial before (after a failed one); sender goroutine only
	backoff    time.Duration                   // last wait between failed dials; sender goroutine only
	out        chan outbound
	quit       chan struct{} // closed when the peer departs
	// sent is the Seq of the last own event handed over (or whose send
	// failed); dropped that of the last one the full queue dropped;
	// stalled is set when a Sent call timed out on this peer and cleared
	// by the sender's next progress (sent.go).
	sent, dropped atomic.Uint64
	stalled       atomic.Bool
}

// startSender is called under memMu.
func (n *Node) startSender(name string) *peerSender {
	p := &peerSender{name: name, out: make(chan outbound, n.cfg.PeerQueueSize), quit: make(chan struct{})}
	// What was published before the peer joined reaches it by the full
	// state it asks for, if not by a batch: Sent does not wait for those.
	p.sent.Store(n.published.Load())
	n.wg.Add(1)
	go n.runSender(p)
	return p
}

func (n *Node) runSender(p *peerSender) {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-p.quit:
			if p.conn != nil {
				p.conn.Close()
			}
			return
		case o := <-p.out:
			if o.buf != nil {
				n.send(p, o)
				n.handed(p, o.seq)
			}
			if o.done != nil {
				close(o.done)
			}
		}
	}
}

func (n *Node) send(p *peerSender, o outbound) {
	node := p.node.Load()
	if node == nil {
		n.stats.sendErrors.Add(1)
		return
	}
	if err := n.sendStream(p, o.buf); err == nil {
		n.stats.streamMessages.Add(1)
		n.stats.messagesSent.Add(1)
		n.stats.bytesSent.Add(uint64(len(o.buf)))
		return
	} else if !errors.Is(err, errNoStream) {
		n.log.Debug("stream send failed; falling back to memberlist", "peer", p.name, "err", err)
	}
	// memberlist's messages carry no sender: sign, so the peer knows which
	// member speaks (and that only its own events are in it).
	buf := encodeSigned(n.signKey, n.cfg.Label, n.cfg.ReplicaID, o.buf)
	var err error
	if !o.reliable && len(buf) <= n.cfg.udpLimit() {
		err = n.ml.SendBestEffort(node, buf)
		n.stats.udpMessages.Add(1)
	} else {
		err = n.ml.SendReliable(node, buf)
		n.stats.tcpMessages.Add(1)
	}
	if err != nil {
		n.stats.sendErrors.Add(1)
		n.log.Debug("send failed", "peer", p.name, "bytes", len(o.buf), "err", err)
		return
	}
	n.stats.messagesSent.Add(1)
	n.stats.bytesSent.Add(uint64(len(o.buf)))
}

// enqueue hands a message to a peer's sender without waiting.
func (n *Node) enqueue(p *peerSender, o outbound) bool {
	select {
	case p.out <- o:
		return true
	default:
		n.stats.peerQueueDrops.Add(1)
		n.droppedFor(p, o.seq)
		return false
	}
}

// broadcast enqueues buf for every live peer; seq is the last own event's
// Seq in it (0: no events).
func (n *Node) broadcast(buf []byte, seq uint64) {
	for _, p := range *n.peers.Load() {
		n.enqueue(p, outbound{buf: buf, seq: seq})
	}
}

// flushPeers waits until every peer's sender handed over what is queued,
// or timeout passes. A peer departing meanwhile is not waited for.
func (n *Node) flushPeers(timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	type marker struct {
		p    *peerSender
		done chan struct{}
	}
	var markers []marker
	for _, p := range *n.peers.Load() {
		m := marker{p: p, done: make(chan struct{})}
		select {
		case p.out <- outbound{done: m.done}:
			markers = append(markers, m)
		case <-p.quit:
		case <-deadline.C:
			n.log.Warn("leave flush timed out", "peer", p.name)
			return
		}
	}
	for _, m := range markers {
		select {
		case <-m.done:
		case <-m.p.quit:
		case <-deadline.C:
			n.log.Warn("leave flush timed out", "peer", m.p.name)
			return
		}
	}
}

// runBatcher sends the published events in batches of at most
// BatchMaxEvents, each BatchInterval after its first event at the latest,
// and the anti-entropy digest every AntiEntropyInterval. It wakes once per
// batch (Publish kicks it when a batch opens or fills), not per event. A
// Sent call waiting for the open batch (urgent) moves its send forward to
// ackGap after the previous batch left, which is now when gossip is quiet:
// while acknowledgements wait, batches leave at most once per ackGap
// (Dynamo's rate), otherwise once per BatchInterval, unless they fill.
func (n *Node) runBatcher() {
	defer close(n.batcherDone)
	var spare []*messages.SequenceEvent
	window := time.NewTimer(time.Hour)
	window.Stop()
	defer window.Stop()
	antiEntropy := time.NewTicker(n.cfg.AntiEntropyInterval)
	defer antiEntropy.Stop()
	var lastFlush time.Time
	gap := n.cfg.ackGap()
	for {
		urgent := false
		select {
		case <-n.kick:
		case <-n.urgent:
			urgent = true
		case <-antiEntropy.C:
			n.sendDigest()
			continue
		case <-n.batcherStop:
			n.flushPending(spare)
			return
		}
		if n.pendingLen() == 0 {
			continue // a stale wake-up: the last flush took the events
		}
		now := time.Now()
		due := now.Add(n.cfg.BatchInterval)
		if early := lastFlush.Add(gap); urgent && early.Before(due) {
			due = early
		}
		window.Reset(due.Sub(now))
		stopping := false
	collect:
		for n.pendingLen() < n.cfg.BatchMaxEvents && due.After(now) {
			select {
			case <-n.kick: // the batch filled (or a stale kick): re-check
			case <-n.urgent:
				if early := lastFlush.Add(gap); early.Before(due) {
					due = early
					now = time.Now()
					window.Reset(due.Sub(now))
				}
			case <-window.C:
				break collect
			case <-n.batcherStop:
				stopping = true
				break collect
			}
		}
		window.Stop()
		spare = n.flushPending(spare)
		lastFlush = time.Now()
		if stopping {
			n.flushPending(spare) // what was published while stopping
			return
		}
	}
}

// flushPending sends everything published so far, in batches of at most
// BatchMaxEvents, and returns the drained slice for reuse.
func (n *Node) flushPending(spare []*messages.SequenceEvent) []*messages.SequenceEvent {
	all := n.takePending(spare)
	for evs := all; len(evs) > 0; {
		k := min(len(evs), n.cfg.BatchMaxEvents)
		n.flush(evs[:k])
		evs = evs[k:]
	}
	clear(all) // flush keeps no reference; let the events go
	return all[:0]
}

func (n *Node) flush(batch []*messages.SequenceEvent) {
	if len(batch) == 0 {
		return
	}
	if len(*n.peers.Load()) == 0 {
		// Nobody to tell; a peer joining later learns our state from the
		// digest and a full-state request.
		return
	}
	buf, err := encodeBatch(batch)
	if err != nil {
		// Publish validated every field proto could refuse, so this is a
		// bug; peers see a Seq gap and repair from the full state.
		n.log.Error("batch not sent", "events", len(batch), "err", err)
		return
	}
	n.stats.batches.Add(1)
	n.stats.eventsSent.Add(uint64(len(batch)))
	n.broadcast(buf, batch[len(batch)-1].Seq)
}

func (n *Node) sendDigest() {
	if len(*n.peers.Load()) == 0 {
		return
	}
	n.broadcast(encodeDigest(n.ownDigest()), 0)
	n.stats.digestsSent.Add(1)
}
