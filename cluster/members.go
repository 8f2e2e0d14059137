package cluster

import (
	"crypto/ed25519"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// deadMemberRetention is how long a departed replica stays listed (and its
// epoch remembered). Replica ids carry a boot nonce, so without pruning
// every restart would leave an entry behind forever.
const deadMemberRetention = 10 * time.Minute

// Member is one replica as memberlist sees it.
type Member struct {
	ReplicaID string
	Addr      string // memberlist host:port
	HTTPAddr  string // from node metadata
	Version   string // from node metadata
	Alive     bool
}

// memberEntry is the Node's record of one replica, guarded by Node.memMu.
type memberEntry struct {
	member Member
	// epoch counts the times the replica was declared dead or left. The
	// apply loop stamps its per-origin state with it, so state built before
	// a departure is never mixed with state after a rejoin.
	epoch  uint64
	leftAt time.Time
	sender *peerSender // nil for this replica and departed ones
	// streamKey is the replica's boot key from its metadata: it signs the
	// replica's stream hellos and memberlist-path messages.
	streamKey ed25519.PublicKey
	// sessions: the replica advertises a session table (nodeMeta.Sessions).
	sessions bool
	// departedKey is the boot key the replica had when it was declared
	// dead or left: the same key coming back is the same process, which
	// was alive (or partitioned) all along, a false death.
	departedKey ed25519.PublicKey
}

// memberDelegate receives memberlist's callbacks. memberlist calls the
// EventDelegate methods one at a time, sometimes while holding its own node
// lock, so they only touch the Node's state and never call back into
// memberlist. Delegate methods run on memberlist's packet and stream
// goroutines and must not block.
type memberDelegate struct{ n *Node }

var (
	_ memberlist.Delegate      = memberDelegate{}
	_ memberlist.EventDelegate = memberDelegate{}
)

func (d memberDelegate) NodeMeta(limit int) []byte {
	if len(d.n.meta) > limit {
		return nil // cannot happen: Validate checked against MetaMaxSize
	}
	return d.n.meta
}

// NotifyMsg copies the message (memberlist reuses the buffer) and hands it
// to the apply loop without waiting.
func (d memberDelegate) NotifyMsg(b []byte) {
	d.n.stats.messagesReceived.Add(1)
	buf := slices.Clone(b)
	select {
	case d.n.inbox <- buf:
	default:
		d.n.stats.inboxDrops.Add(1)
	}
}

// GetBroadcasts returns nothing: batches go to peers directly (see the
// package documentation), not through the gossip queue.
func (memberDelegate) GetBroadcasts(int, int) [][]byte { return nil }

// LocalState and MergeRemoteState are unused: load state is repaired by
// anti-entropy, not by memberlist's push/pull.
func (memberDelegate) LocalState(bool) []byte                 { return nil }
func (memberDelegate) MergeRemoteState(buf []byte, join bool) {}

func (d memberDelegate) NotifyJoin(node *memberlist.Node) { d.n.memberUp(node) }

func (d memberDelegate) NotifyUpdate(node *memberlist.Node) { d.n.memberUp(node) }

// NotifyLeave runs when memberlist declares a replica dead or left: its
// requests are dropped at once.
func (d memberDelegate) NotifyLeave(node *memberlist.Node) { d.n.memberDown(node.Name) }

func (n *Node) memberUp(node *memberlist.Node) {
	meta, err := decodeMeta(node.Meta)
	if err != nil {
		n.log.Warn("peer metadata unreadable", "replica", node.Name, "err", err)
	}
	copied := *node
	n.memMu.Lock()
	defer n.memMu.Unlock()
	if n.memClosed {
		return // a handler memberlist's Shutdown left running
	}
	e := n.members[node.Name]
	if e == nil {
		e = &memberEntry{}
		n.members[node.Name] = e
	}
	e.member = Member{
		ReplicaID: node.Name, Addr: node.Address(),
		HTTPAddr: meta.HTTPAddr, Version: meta.Version, Alive: true,
	}
	e.leftAt = time.Time{}
	e.streamKey = meta.streamKey()
	e.sessions = meta.Sessions
	if e.departedKey != nil && e.streamKey != nil && e.departedKey.Equal(e.streamKey) {
		n.stats.falseDeaths.Add(1)
		n.log.Warn("a replica declared dead came back with the same boot key: a false death (or a healed partition)", "replica", node.Name)
	}
	e.departedKey = nil
	if node.Name == n.cfg.ReplicaID {
		return
	}
	if e.sender == nil {
		e.sender = n.startSender(node.Name)
		n.refreshPeersLocked()
	}
	e.sender.node.Store(&copied)
	port := meta.StreamPort
	if meta.StreamVersion != streamProtocolVersion {
		port = 0 // a stream we cannot speak: memberlist's paths only
	}
	e.sender.streamPort.Store(int32(port))
}

func (n *Node) memberDown(name string) {
	if name == n.cfg.ReplicaID {
		return
	}
	n.synced.forget(name)
	n.memMu.Lock()
	defer n.memMu.Unlock()
	if n.memClosed {
		return
	}
	e := n.members[name]
	if e == nil {
		e = &memberEntry{member: Member{ReplicaID: name}}
		n.members[name] = e
	}
	wasAlive := e.member.Alive || e.sender != nil
	e.member.Alive = false
	if e.streamKey != nil {
		e.departedKey = e.streamKey
	}
	e.streamKey = nil
	n.streams.dropMember(name)
	e.epoch++
	e.leftAt = time.Now()
	if e.sender != nil {
		close(e.sender.quit)
		e.sender = nil
		n.refreshPeersLocked()
	}
	// Called under memMu, like every other sink call for an origin, so no
	// event of this origin can slip in after the drop.
	n.sink.DropOrigin(name)
	n.stats.originsDropped.Add(1)
	if wasAlive {
		n.log.Info("replica departed, its requests dropped", "replica", name)
	}
	n.pruneLocked(time.Now())
}

// refreshPeersLocked republishes the fan-out list after a change.
func (n *Node) refreshPeersLocked() {
	peers := make([]*peerSender, 0, len(n.members))
	for _, e := range n.members {
		if e.sender != nil {
			peers = append(peers, e.sender)
		}
	}
	n.peers.Store(&peers)
}

func (n *Node) pruneLocked(now time.Time) {
	for name, e := range n.members {
		if !e.member.Alive && !e.leftAt.IsZero() && now.Sub(e.leftAt) > deadMemberRetention {
			delete(n.members, name)
		}
	}
}

// originStatus says whether events of origin may be applied, and the epoch
// they belong to. Only a current member's are: an origin memberlist never
// announced would never be declared dead either, so its requests would
// stay forever. (Events that beat the membership gossip are dropped and
// recovered from the origin's digest and full state.)
func (n *Node) originStatus(origin string) (alive bool, epoch uint64) {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	e := n.members[origin]
	if e == nil {
		return false, 0
	}
	return e.member.Alive, e.epoch
}

// memberStreamKey returns an alive member's boot key and epoch (this
// replica's own included, for echoes); ok is false for anyone else.
func (n *Node) memberStreamKey(name string) (key ed25519.PublicKey, epoch uint64, ok bool) {
	if name == n.cfg.ReplicaID {
		return n.signKey.Public().(ed25519.PublicKey), 0, true
	}
	n.memMu.Lock()
	defer n.memMu.Unlock()
	e := n.members[name]
	if e == nil || !e.member.Alive || e.streamKey == nil {
		return nil, 0, false
	}
	return e.streamKey, e.epoch, true
}

// memberKeepsSessions reports whether a member advertises a session table.
func (n *Node) memberKeepsSessions(name string) bool {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	e := n.members[name]
	return e != nil && e.sessions
}

// memberCurrent reports whether name is still the alive member of epoch.
func (n *Node) memberCurrent(name string, epoch uint64) bool {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	e := n.members[name]
	return e != nil && e.member.Alive && e.epoch == epoch
}

// withOrigin runs fn (a non-blocking Sink call) unless origin departed or
// changed epoch, under the lock memberDown holds while dropping it.
func (n *Node) withOrigin(origin string, epoch uint64, fn func()) bool {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	if e := n.members[origin]; e != nil && (e.epoch != epoch || !e.member.Alive) {
		return false
	}
	fn()
	return true
}

func (n *Node) senderFor(name string) *peerSender {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	if e := n.members[name]; e != nil {
		return e.sender
	}
	return nil
}

// Members lists the replicas known, this one included, sorted by id;
// departed ones are kept (Alive false) for a while.
func (n *Node) Members() []Member {
	n.memMu.Lock()
	n.pruneLocked(time.Now())
	out := make([]Member, 0, len(n.members))
	for _, e := range n.members {
		out = append(out, e.member)
	}
	n.memMu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ReplicaID, b.ReplicaID) })
	return out
}

func (n *Node) aliveMembers() int {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	alive := 0
	for _, e := range n.members {
		if e.member.Alive {
			alive++
		}
	}
	return alive
}
