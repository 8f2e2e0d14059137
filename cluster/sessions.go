package cluster

import (
	"cmp"
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/messages"
)

// SessionSink is an optional Sink extension: the replica's sticky-session
// table, which is cluster state shared by every replica. Session writes
// (SessionBound, SessionEnded events) travel in the replica's event stream
// like request changes and reach ApplyRemote; the table has no single
// owner, so its anti-entropy is not per origin: every AntiEntropyInterval
// each replica sends the digest of its whole table, and a peer whose table
// disagrees (at once the first time, then on two digests in a row, since
// writes in flight make single mismatches normal) asks for the table and
// merges it. Merging is last-writer-wins per session, so tables converge
// whatever order merges happen in.
//
// The calls come from one goroutine of the Node; SessionDigest and
// SessionSnapshot may block until ctx is done, MergeSessions must not.
type SessionSink interface {
	SessionDigest(ctx context.Context) (Digest, error)
	// SessionSnapshot is the whole table as SessionBound and SessionEnded
	// events, in any order.
	SessionSnapshot(ctx context.Context) ([]*messages.SequenceEvent, error)
	// MergeSessions merges a peer's table (the events are not modified
	// afterwards).
	MergeSessions(evs []*messages.SequenceEvent)
}

// sessionWriter returns the writer named by a session event's version.
func sessionWriter(ev *messages.SequenceEvent) (string, bool) {
	switch {
	case ev.GetSessionBound() != nil:
		return ev.GetSessionBound().GetWriter(), true
	case ev.GetSessionEnded() != nil:
		return ev.GetSessionEnded().GetWriter(), true
	}
	return "", false
}

func sessionLastUsed(ev *messages.SequenceEvent) int64 {
	if b := ev.GetSessionBound(); b != nil {
		return b.GetLastUsedUnixNano()
	}
	return ev.GetSessionEnded().GetLastUsedUnixNano()
}

// sessionInboxSize bounds session frames waiting for the session loop;
// beyond it they are dropped (the next digest retries).
const sessionInboxSize = 64

// sessionPeer is the session loop's view of one peer.
type sessionPeer struct {
	synced     bool      // its digest matched ours, or we merged its table
	mismatches int       // digests in a row that disagreed
	nonce      uint64    // table request in flight (0: none)
	asked      time.Time // when it was sent
}

// sessionSync runs the session table's anti-entropy on its own goroutine
// (it asks the sink, which may block; the receiver must not).
type sessionSync struct {
	n     *Node
	sink  SessionSink // nil: the sink keeps no sessions, frames are ignored
	inbox chan frame
	peers map[string]*sessionPeer
	nonce uint64
	ready syncedSet // peers whose session table we hold as they do
}

func newSessionSync(n *Node, sink Sink) *sessionSync {
	s := &sessionSync{n: n, inbox: make(chan frame, sessionInboxSize), peers: map[string]*sessionPeer{}}
	s.sink, _ = sink.(SessionSink)
	return s
}

// offer hands a session frame to the loop without blocking.
func (s *sessionSync) offer(f frame) {
	if s.sink == nil {
		return
	}
	select {
	case s.inbox <- f:
	default:
		s.n.stats.inboxDrops.Add(1)
	}
}

// synced reports whether a peer's sessions are held (always true when
// either side keeps no sessions).
func (s *sessionSync) synced(name string) bool {
	return s.sink == nil || s.ready.has(name) || !s.n.memberKeepsSessions(name)
}

func (s *sessionSync) run() {
	defer s.n.wg.Done()
	if s.sink == nil {
		return
	}
	tick := time.NewTicker(s.n.cfg.AntiEntropyInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.n.stop:
			return
		case now := <-tick.C:
			s.prune()
			s.sendDigest(now)
		case f := <-s.inbox:
			switch f.kind {
			case frameSessionDigest:
				s.onDigest(f.sessionDigest, time.Now())
			case frameSessionRequest:
				s.serve(f.sessionRequest)
			case frameSessionReply:
				s.onReply(f.sessionReply)
			}
		}
	}
}

func (s *sessionSync) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.n.cfg.SinkTimeout)
}

// prune forgets departed peers (a returning one starts unsynced).
func (s *sessionSync) prune() {
	for name := range s.peers {
		if alive, _ := s.n.originStatus(name); !alive {
			delete(s.peers, name)
			s.ready.forget(name)
		}
	}
}

func (s *sessionSync) sendDigest(time.Time) {
	if len(*s.n.peers.Load()) == 0 {
		return
	}
	ctx, cancel := s.ctx()
	defer cancel()
	d, err := s.sink.SessionDigest(ctx)
	if err != nil {
		s.n.log.Warn("session digest unavailable", "err", err)
		return
	}
	s.n.broadcast(encodeSessionDigest(sessionDigestMsg{Origin: s.n.cfg.ReplicaID, Digest: d}), 0)
	s.n.stats.sessionDigestsSent.Add(1)
}

func (s *sessionSync) peer(name string) *sessionPeer {
	p := s.peers[name]
	if p == nil {
		p = &sessionPeer{}
		s.peers[name] = p
	}
	return p
}

func (s *sessionSync) onDigest(d sessionDigestMsg, now time.Time) {
	if d.Origin == s.n.cfg.ReplicaID {
		return
	}
	if alive, _ := s.n.originStatus(d.Origin); !alive {
		return
	}
	ctx, cancel := s.ctx()
	ours, err := s.sink.SessionDigest(ctx)
	cancel()
	if err != nil {
		s.n.log.Warn("session digest unavailable", "err", err)
		return
	}
	p := s.peer(d.Origin)
	if ours == d.Digest {
		p.synced, p.mismatches = true, 0
		s.ready.mark(d.Origin)
		return
	}
	p.mismatches++
	s.n.stats.sessionMismatches.Add(1)
	if p.synced && p.mismatches < 2 {
		return // most likely writes in flight; the next digest tells
	}
	if p.nonce != 0 && now.Sub(p.asked) < s.n.cfg.RepairTimeout {
		return
	}
	sender := s.n.senderFor(d.Origin)
	if sender == nil {
		return
	}
	s.nonce++
	req := encodeSessionRequest(stateRequest{Requester: s.n.cfg.ReplicaID, Nonce: s.nonce})
	if s.n.enqueue(sender, outbound{buf: req, reliable: true}) {
		p.nonce, p.asked = s.nonce, now
		s.n.stats.sessionRequests.Add(1)
	}
}

// serve sends our table to a peer that asked, truncated (least recently
// used entries last, so first to go) to fit a frame.
func (s *sessionSync) serve(req stateRequest) {
	ctx, cancel := s.ctx()
	evs, err := s.sink.SessionSnapshot(ctx)
	cancel()
	if err != nil {
		s.n.log.Warn("cannot serve the session table", "requester", req.Requester, "err", err)
		return
	}
	out := make([]*messages.SequenceEvent, 0, len(evs))
	total := 0
	for _, ev := range evs {
		if _, err := eventRequestID(ev); err != nil {
			continue
		}
		e := &messages.SequenceEvent{Origin: s.n.cfg.ReplicaID, Data: ev.Data}
		total += proto.Size(e) + 4
		out = append(out, e)
	}
	if budget := s.n.cfg.MaxFrameBytes - 4096; total > budget {
		// Too big for one frame: keep the most recently used.
		slices.SortFunc(out, func(a, b *messages.SequenceEvent) int { return cmp.Compare(sessionLastUsed(b), sessionLastUsed(a)) })
		kept := 0
		for _, e := range out {
			if budget -= proto.Size(e) + 4; budget < 0 {
				break
			}
			kept++
		}
		s.n.stats.sessionsTruncated.Add(uint64(len(out) - kept))
		out = out[:kept]
	}
	buf, err := encodeSessionReply(sessionReply{Origin: s.n.cfg.ReplicaID, Nonce: req.Nonce, Entries: out})
	if err != nil {
		s.n.log.Error("cannot encode the session table", "err", err)
		return
	}
	if p := s.n.senderFor(req.Requester); p != nil && s.n.enqueue(p, outbound{buf: buf, reliable: true}) {
		s.n.stats.sessionReplies.Add(1)
	}
}

func (s *sessionSync) onReply(rep sessionReply) {
	p := s.peers[rep.Origin]
	if p == nil || p.nonce == 0 || p.nonce != rep.Nonce {
		s.n.stats.staleEvents.Add(1)
		return
	}
	p.nonce = 0
	evs := rep.Entries[:0]
	for _, ev := range rep.Entries {
		if _, ok := sessionWriter(ev); ok {
			if _, err := eventRequestID(ev); err == nil {
				evs = append(evs, ev)
				continue
			}
		}
		s.n.stats.malformed.Add(1)
	}
	s.sink.MergeSessions(evs)
	s.n.stats.sessionMerges.Add(1)
	p.synced, p.mismatches = true, 0
	s.ready.mark(rep.Origin)
}
