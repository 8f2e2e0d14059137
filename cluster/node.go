package cluster

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/kvrouter/kvrouter/messages"
)

var (
	// ErrClosed is returned by Publish and Leave once the Node is leaving
	// or shut down.
	ErrClosed = errors.New("cluster: node closed")
	// ErrQueueFull is returned by Publish when the local queue is full; the
	// event is dropped and counted, and anti-entropy repairs peers later.
	ErrQueueFull = errors.New("cluster: publish queue full")
)

// maxConcurrentSnapshots bounds how many full-state requests are served at
// once; further requests are dropped and their requesters retry.
const maxConcurrentSnapshots = 2

// Node is this replica's membership in the cluster. Its methods are safe
// for concurrent use.
type Node struct {
	cfg  Config
	sink Sink
	log  *slog.Logger
	meta []byte
	ml   *memberlist.Memberlist
	// localAddr is memberlist's own address, read once at start: the
	// local node's entry can vanish from memberlist's node map while it
	// shuts down, and LocalNode then dereferences nil (seen from the
	// rejoin loop racing a shutdown).
	localAddr string

	synced syncedSet // peers whose requests we hold as they see them
	// registry compares peers' worker registries with ours (registry.go).
	registry registryAgreement

	// pubMu orders Publish: Seq stamping, the ledger and the append to
	// pending happen together, so pending is in Seq order.
	pubMu   sync.Mutex
	seq     uint64
	ledger  *ledger
	closed  bool
	pending []*messages.SequenceEvent // stamped, not yet batched
	// published is seq, readable without pubMu (Sent's target).
	published atomic.Uint64
	// urgent asks the batcher to send the open batch early (Sent).
	urgent      chan struct{}
	sentWaiters sentWaiters
	// kick wakes the batcher when pending opens a batch (first event) or
	// fills one; events in between wake nobody, so publishing costs no
	// goroutine switch per event.
	kick chan struct{}

	// memMu guards members and serialises every Sink call that changes an
	// origin's state (ApplyRemote, ReplaceOrigin, DropOrigin).
	memMu   sync.Mutex
	members map[string]*memberEntry
	// memClosed (under memMu) is set by Shutdown before it waits for the
	// goroutines: memberlist's stream handlers outlive its Shutdown and
	// may still report a join, which must not start a sender then.
	memClosed bool
	peers     atomic.Pointer[[]*peerSender]

	inbox     chan []byte
	recv      *receiver
	sessions  *sessionSync  // the sticky-session table's anti-entropy
	snapshots chan struct{} // semaphore for serving full states
	stats     counters
	// unregisterDetector stops routing memberlist's metrics to stats.
	unregisterDetector func()

	batcherStop chan struct{} // closed to make the batcher flush and exit
	batcherDone chan struct{}
	stop        chan struct{} // closed by Shutdown: every goroutine exits
	wg          sync.WaitGroup
	leaveOnce   sync.Once
	stopOnce    sync.Once
	leaveErr    error
	streams     *streams

	// signKey is this boot's key: its public half is in our metadata, and
	// it signs our stream hellos and memberlist-path messages.
	signKey ed25519.PrivateKey
	// keyring is memberlist's (nil: unkeyed); trust the streams' TLS. keyMu
	// orders key changes; keys is the set in use, primary first.
	keyring *memberlist.Keyring
	trust   *streamTrust
	keyMu   sync.Mutex
	keys    [][]byte
	// join is what the last join attempt found (membership.go).
	joined joinState
}

// Start validates cfg, starts memberlist and the Node's goroutines and
// joins cfg.Join. A join that reaches nobody is retried every
// RejoinInterval; with RejoinInterval 0 it is an error. ctx bounds name
// resolution; each join attempt is bounded by TCPTimeout per address.
func Start(ctx context.Context, cfg Config, sink Sink) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, fmt.Errorf("%w: nil sink", ErrInvalidConfig)
	}
	keys := cloneKeys(cfg.Keys)
	if cfg.KeyFile != "" {
		var err error
		if keys, err = LoadKeyFile(cfg.KeyFile); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	var ring *memberlist.Keyring
	if len(keys) > 0 {
		var err error
		if ring, err = memberlist.NewKeyring(keys, keys[0]); err != nil {
			return nil, fmt.Errorf("%w: keys: %w", ErrInvalidConfig, err)
		}
	}
	trust, err := newStreamTrust(cfg, keys)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	pub, signKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("cluster: boot key: %w", err)
	}
	st, err := listenStreams(cfg.BindAddr, trust)
	if err != nil {
		return nil, err
	}
	m := cfg.meta()
	m.StreamPort = st.port()
	m.StreamKey = base64.StdEncoding.EncodeToString(pub)
	_, m.Sessions = sink.(SessionSink)
	meta, err := encodeMeta(m)
	if err != nil {
		st.ln.Close()
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	n := &Node{
		cfg:         cfg,
		sink:        sink,
		log:         cfg.logger().With("component", "cluster", "replica", cfg.ReplicaID),
		meta:        meta,
		ledger:      newLedger(),
		kick:        make(chan struct{}, 1),
		urgent:      make(chan struct{}, 1),
		members:     make(map[string]*memberEntry),
		inbox:       make(chan []byte, cfg.InboxSize),
		snapshots:   make(chan struct{}, maxConcurrentSnapshots),
		batcherStop: make(chan struct{}),
		batcherDone: make(chan struct{}),
		stop:        make(chan struct{}),
		streams:     st,
		signKey:     signKey,
		keyring:     ring,
		trust:       trust,
		keys:        keys,
	}
	n.recv = newReceiver(n)
	n.sentWaiters.log.Every = time.Minute
	n.sessions = newSessionSync(n, sink)
	n.peers.Store(&[]*peerSender{})

	mc := cfg.memberlistConfig(ring, &n.stats)
	mc.Delegate = memberDelegate{n}
	mc.Events = memberDelegate{n}
	mc.MetricLabels, n.unregisterDetector = registerDetector(&n.stats)
	if cfg.wrapTransport != nil {
		if err := wrapTransport(mc, cfg.wrapTransport); err != nil {
			n.unregisterDetector()
			st.ln.Close()
			return nil, err
		}
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		n.unregisterDetector()
		st.ln.Close()
		return nil, fmt.Errorf("cluster: start memberlist: %w", err)
	}
	n.ml = ml
	n.localAddr = ml.LocalNode().Address()
	n.wg.Add(1)
	go n.acceptStreams()

	n.wg.Add(1)
	go n.runApply()
	n.wg.Add(1)
	go n.sessions.run()
	go n.runBatcher()

	if len(cfg.Join) > 0 {
		if err := n.join(ctx); err != nil {
			if cfg.RejoinInterval == 0 {
				n.Shutdown()
				return nil, err
			}
			n.log.Warn("join failed, retrying in the background", "err", err, "every", cfg.RejoinInterval)
		}
	}
	if len(cfg.Join) > 0 && cfg.RejoinInterval > 0 {
		n.wg.Add(1)
		go n.runRejoin()
	}
	if cfg.KeyFile != "" && cfg.KeyReloadInterval > 0 {
		n.wg.Add(1)
		go n.runKeyReload()
	}
	gossip := "UNAUTHENTICATED (no cluster key)"
	if len(keys) > 0 {
		gossip = fmt.Sprintf("encrypted and authenticated, %d key(s), primary %s", len(keys), KeyID(keys[0]))
	}
	n.log.Info("node started", "addr", n.LocalAddr(), "members", n.ml.NumMembers(),
		"gossip", gossip, "streams", trust.mode.String(), "label", cfg.Label)
	if len(keys) == 0 && !isLoopback(cfg.BindAddr) {
		n.log.Warn("gossip is unauthenticated on a non-loopback address: anyone who reaches it can join, read in-flight requests and steer routing",
			"bind", cfg.BindAddr)
	}
	return n, nil
}

// SetKeys replaces the cluster keys at run time, primary first, without a
// moment where a key of the old or the new set stops decrypting. A Node
// started without keys cannot take any (memberlist's encryption is fixed
// at start).
func (n *Node) SetKeys(keys [][]byte) error {
	if n.keyring == nil {
		return fmt.Errorf("%w: the node started without keys", ErrInvalidConfig)
	}
	if len(keys) == 0 || len(keys) > maxKeys {
		return fmt.Errorf("%w: %d keys, want 1 to %d", ErrInvalidConfig, len(keys), maxKeys)
	}
	for i, k := range keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return fmt.Errorf("%w: key %d: %w", ErrInvalidConfig, i, err)
		}
	}
	n.keyMu.Lock()
	defer n.keyMu.Unlock()
	if keysEqual(n.keys, keys) {
		return nil
	}
	keys = cloneKeys(keys)
	// Streams first: their accepted set and presented certificate follow
	// the same order (new key accepted before anyone presents it).
	if err := n.trust.setKeys(keys); err != nil {
		return err
	}
	if err := setKeyring(n.keyring, keys); err != nil {
		return fmt.Errorf("cluster: keyring: %w", err)
	}
	n.keys = keys
	n.stats.keyChanges.Add(1)
	n.log.Info("cluster keys changed", "primary", KeyID(keys[0]), "keys", keyIDs(keys))
	return nil
}

// KeyIDs names the keys in use, primary first (see KeyID).
func (n *Node) KeyIDs() []string {
	n.keyMu.Lock()
	defer n.keyMu.Unlock()
	return keyIDs(n.keys)
}

// runKeyReload re-reads KeyFile and applies a changed key set. A file
// that does not parse is reported and the keys in use stay.
func (n *Node) runKeyReload() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.KeyReloadInterval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		keys, err := LoadKeyFile(n.cfg.KeyFile)
		if err == nil {
			err = n.SetKeys(keys)
		}
		if err != nil {
			n.stats.keyReloadErrors.Add(1)
			if err.Error() != lastErr {
				n.log.Error("cluster key file not applied; the keys in use stay", "err", err, "keys", n.KeyIDs())
			}
			lastErr = err.Error()
			continue
		}
		lastErr = ""
	}
}

// ID is this replica's id (its memberlist name and published Origin).
func (n *Node) ID() string { return n.cfg.ReplicaID }

// LocalAddr is the address peers reach this replica at ("ip:port"), with
// the port memberlist picked when BindPort was 0.
func (n *Node) LocalAddr() string { return n.localAddr }

// Publish sends one of this replica's own sequence changes to every peer.
// It never blocks: it stamps a copy of ev with Origin = ReplicaID and the
// next Seq and queues it for the batcher. ev itself is not modified and
// must not be modified afterwards (its Data is shared with the copy).
func (n *Node) Publish(ev *messages.SequenceEvent) error {
	id, err := eventRequestID(ev)
	if err != nil {
		return err
	}
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	if n.closed {
		return ErrClosed
	}
	n.seq++
	n.published.Store(n.seq)
	out := &messages.SequenceEvent{Origin: n.cfg.ReplicaID, Seq: n.seq, Data: ev.Data}
	// The ledger follows the replica's state even when the queue drops the
	// event: peers then see a Seq gap or a digest mismatch and repair.
	n.ledger.apply(out, id)
	if len(n.pending) >= n.cfg.QueueSize {
		n.stats.eventsDropped.Add(1)
		return ErrQueueFull
	}
	n.pending = append(n.pending, out)
	n.stats.eventsPublished.Add(1)
	if len(n.pending) == 1 || len(n.pending) == n.cfg.BatchMaxEvents {
		select {
		case n.kick <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
	return nil
}

// takePending hands the batcher every stamped event, in Seq order, and
// gives Publish spare (emptied) to fill next.
func (n *Node) takePending(spare []*messages.SequenceEvent) []*messages.SequenceEvent {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	out := n.pending
	n.pending = spare[:0]
	return out
}

func (n *Node) pendingLen() int {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	return len(n.pending)
}

// lastSeq is the Seq of the last published event.
func (n *Node) lastSeq() uint64 {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	return n.seq
}

// ownDigest is the digest of the published stream after lastSeq, read
// atomically with it.
func (n *Node) ownDigest() digestMsg {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	d := digestMsg{Origin: n.cfg.ReplicaID, Seq: n.seq, Digest: n.ledger.digest}
	if n.cfg.RegistryDigest != nil {
		d.Registry, d.HasRegistry = n.cfg.RegistryDigest(), true
	}
	return d
}

// Stats returns the Node's counters.
func (n *Node) Stats() Stats {
	s := n.stats.snapshot()
	s.Members = n.aliveMembers()
	n.keyMu.Lock()
	s.Keys = len(n.keys)
	n.keyMu.Unlock()
	return s
}

// Leave stops publishing, flushes queued events to peers, announces the
// departure and waits LeaveSettle for it to spread; peers drop this
// replica's requests at once. Call Shutdown afterwards. timeout bounds the
// flush and the leave broadcast each.
func (n *Node) Leave(timeout time.Duration) error {
	n.leaveOnce.Do(func() {
		n.leaveErr = n.leave(timeout)
	})
	return n.leaveErr
}

func (n *Node) leave(timeout time.Duration) error {
	select {
	case <-n.stop:
		return ErrClosed
	default:
	}
	n.stopPublishing()
	n.flushPeers(timeout)
	if err := n.ml.Leave(timeout); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	// memberlist returns once the leave message went out to one peer; give
	// gossip a moment to carry it to the rest before we stop answering.
	time.Sleep(n.cfg.LeaveSettle)
	return nil
}

// Shutdown stops the Node at once. Without a prior Leave, peers see a
// failure and drop this replica's requests after memberlist's suspicion
// timeout. Safe to call more than once.
func (n *Node) Shutdown() {
	n.stopOnce.Do(func() {
		n.stopPublishing()
		// Exclude Leave (whose leaveOnce may still be running) from calling
		// memberlist after its shutdown: memberlist panics on that.
		n.leaveOnce.Do(func() { n.leaveErr = ErrClosed })
		if err := n.ml.Shutdown(); err != nil {
			n.log.Warn("memberlist shutdown", "err", err)
		}
		n.unregisterDetector()
		n.memMu.Lock()
		n.memClosed = true
		n.memMu.Unlock()
		close(n.stop)
		n.closeStreams()
		n.wg.Wait()
		n.log.Info("node stopped")
	})
}

// stopPublishing refuses further Publish calls and waits for the batcher
// to flush what was queued.
func (n *Node) stopPublishing() {
	n.pubMu.Lock()
	already := n.closed
	n.closed = true
	n.pubMu.Unlock()
	if !already {
		close(n.batcherStop)
	}
	<-n.batcherDone
}

// join resolves cfg.Join and joins every address except our own.
func (n *Node) join(ctx context.Context) error {
	addrs, err := resolveJoin(ctx, net.DefaultResolver.LookupHost, n.cfg.Join)
	if err != nil && len(addrs) == 0 {
		return fmt.Errorf("cluster: join: %w", err)
	}
	if err != nil {
		n.log.Warn("some join addresses did not resolve", "err", err)
	}
	self := n.LocalAddr()
	targets := addrs[:0]
	for _, a := range addrs {
		if a != self {
			targets = append(targets, a)
		}
	}
	if len(targets) == 0 {
		n.joined.note(false, nil)
		return nil // we are the only seed
	}
	joined, err := n.ml.Join(targets)
	if err != nil {
		if isKeyMismatch(err.Error()) {
			n.stats.keyMismatch(time.Now())
		}
		err = fmt.Errorf("cluster: join %v: %w", targets, err)
		n.joined.note(true, err)
		return err
	}
	n.joined.note(true, nil)
	n.log.Info("joined", "contacted", joined, "of", len(targets))
	return nil
}

// runRejoin retries the seeds that are not alive members, which heals a
// start before any peer was up and a partition long enough for memberlist
// to stop probing the other side.
func (n *Node) runRejoin() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.RejoinInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		if !n.needsRejoin() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.TCPTimeout)
		if err := n.join(ctx); err != nil {
			n.log.Debug("rejoin failed", "err", err)
		}
		cancel()
	}
}

// needsRejoin reports whether some seed may be outside our cluster: a
// seed given as an IP that is not an alive member or, for seeds given as
// names (whose addresses come and go), being alone or having lost members.
func (n *Node) needsRejoin() bool {
	members := n.Members()
	alive := make(map[string]bool, len(members))
	for _, m := range members {
		if m.Alive {
			alive[m.Addr] = true
		}
	}
	for _, seed := range n.cfg.Join {
		host, _, err := net.SplitHostPort(seed)
		switch {
		case err != nil:
			continue // Validate rejects these
		case net.ParseIP(host) == nil:
			if len(alive) <= 1 || len(alive) < len(members) {
				return true
			}
		case !alive[seed]:
			return true
		}
	}
	return false
}

// wrapTransport builds the transport memberlist.Create would and hands
// memberlist the wrapped one.
func wrapTransport(mc *memberlist.Config, wrap func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport) error {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger, MetricLabels: mc.MetricLabels,
	})
	if err != nil {
		return fmt.Errorf("cluster: transport: %w", err)
	}
	if mc.BindPort == 0 {
		mc.BindPort = nt.GetAutoBindPort()
		mc.AdvertisePort = mc.BindPort
	}
	mc.Transport = wrap(nt)
	return nil
}
