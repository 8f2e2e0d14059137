package cluster

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"
)

// Ceilings on configuration values. They keep a typo (an extra zero, a
// Duration given as a bare number of nanoseconds) from turning into a
// runaway allocation or a silent no-op.
const (
	// MaxBatchEvents matches the largest batch a peer is willing to apply in
	// one go; Dynamo uses 256.
	MaxBatchEvents = 65_536
	// MaxQueueSize bounds the local publish queue (Dynamo: 100,000).
	MaxQueueSize = 10_000_000
	// MinBatchInterval stops a 1000 (meaning 1 µs) from spinning the batcher.
	MinBatchInterval = 10 * time.Microsecond
	// udpOverhead is what memberlist adds around a user message in a
	// packet: a type byte and a CRC header (5 bytes), plus headroom.
	// Encryption and a label add more (udpLimit).
	udpOverhead = 16
	// encryptOverhead is memberlist's AES-GCM envelope (version byte,
	// 12-byte nonce, 16-byte tag).
	encryptOverhead = 29
	// minUDPBufferSize keeps room for a digest after the overhead.
	minUDPBufferSize = 512
	// MaxFrameBytesLimit is the largest MaxFrameBytes accepted.
	MaxFrameBytesLimit = 1 << 30
	// minFrameBytes keeps room for a batch of MaxBatchEvents small events.
	minFrameBytes = 1 << 16
	// MaxInboundStreamsLimit is the largest MaxInboundStreams accepted.
	MaxInboundStreamsLimit = 1 << 16
)

// DefaultConfig's BatchMaxEvents and BatchInterval, and the defaults of the
// router's cluster-batch-max-events and cluster-batch-interval flags.
// Dynamo batches up to MAX_REPLICA_BATCH_EVENTS = 256 events or
// MAX_REPLICA_BATCH_DURATION = 1 ms (constants, not knobs there). We wait
// 5 ms: fewer, larger batches cost every peer less per applied decision
// (with stride 8, 3 vs 1 replicas 2.61x at 1 ms, 2.72x at 5 ms), at 4 ms
// more gossip delay, well under a decision's TTFT.
const (
	DefaultBatchMaxEvents = 256
	DefaultBatchInterval  = 5 * time.Millisecond
)

// CheckBatchMaxEvents is the rule for BatchMaxEvents: 1 to MaxBatchEvents.
// Validate applies it, and so does the router's flag validation, so a value
// is accepted or rejected alike in both places.
func CheckBatchMaxEvents(n int) error {
	if n < 1 || n > MaxBatchEvents {
		return fmt.Errorf("%d not in [1, %d]", n, MaxBatchEvents)
	}
	return nil
}

// CheckBatchInterval is the rule for BatchInterval: at least
// MinBatchInterval. Like CheckBatchMaxEvents, it is shared with the
// router's flag validation.
func CheckBatchInterval(d time.Duration) error {
	if d < MinBatchInterval {
		return fmt.Errorf("%v below %v", d, MinBatchInterval)
	}
	return nil
}

// ErrInvalidConfig is wrapped by every Validate error.
var ErrInvalidConfig = errors.New("cluster: invalid config")

// Config configures a Node. Start from DefaultConfig (production, memberlist
// LAN timings) or LocalTestConfig (fast timings for in-process tests).
type Config struct {
	// ReplicaID is the memberlist node name and the Origin stamped on every
	// published event. It must be unique for the life of the process:
	// memberlist rejects a known name arriving from a new address, so the
	// default is the hostname plus a random boot nonce, which a restarted
	// pod (same hostname, new IP) does not collide with.
	ReplicaID string

	// BindAddr and BindPort are where memberlist listens (UDP and TCP).
	// BindPort 0 picks a free port; Node.LocalAddr reports the chosen one.
	BindAddr string
	BindPort int

	// AdvertiseAddr and AdvertisePort are what peers dial; empty/0 means
	// the bound address and port.
	AdvertiseAddr string
	AdvertisePort int

	// Join lists peers as "host:port". A host name is resolved and every
	// address it resolves to is joined, so a Kubernetes headless Service
	// name joins all its ready pods. Empty starts a cluster of one.
	Join []string

	// RejoinInterval is how often Join is retried while none of the seeds
	// is a live member. It heals a start before any peer was up and a
	// partition outlasting memberlist's gossip-to-the-dead window. 0
	// disables retries.
	RejoinInterval time.Duration

	// HTTPAddr and Version are advertised in node metadata so operators
	// (and Members) can see where each replica serves and what it runs.
	HTTPAddr string
	Version  string

	// BatchMaxEvents and BatchInterval bound a batch: it is sent when it
	// holds BatchMaxEvents events or BatchInterval after its first event,
	// whichever comes first (Dynamo: 256 events, 1 ms).
	BatchMaxEvents int
	BatchInterval  time.Duration

	// AckTimeout bounds how long Sent waits for a peer's sender (0: four
	// BatchIntervals and 20 ms).
	AckTimeout time.Duration

	// QueueSize bounds the local publish queue; when full, Publish drops
	// the newest event and counts it (Dynamo: 100,000).
	QueueSize int

	// PeerQueueSize bounds the encoded messages waiting for one peer, so a
	// slow or dying peer cannot hold up the others.
	PeerQueueSize int

	// InboxSize bounds the received messages waiting to be applied;
	// NotifyMsg drops (and counts) when it is full rather than stall
	// memberlist's packet loop.
	InboxSize int

	// GapTimeout is how long a missing Seq is waited for (UDP and separate
	// TCP streams can reorder) before it is declared lost and the origin is
	// asked for its full state.
	GapTimeout time.Duration

	// AntiEntropyInterval is how often this replica sends the digest of its
	// own requests to every peer.
	AntiEntropyInterval time.Duration

	// RepairTimeout abandons a full-state request with no reply, so the
	// next digest can ask again.
	RepairTimeout time.Duration

	// SinkTimeout bounds the Sink calls that may block (OriginDigest,
	// OwnedRequests).
	SinkTimeout time.Duration

	// RegistryDigest, when set, returns this replica's worker-registry
	// digest: it rides on every anti-entropy digest and peers compare it
	// with theirs (registry.go). It must not block. RegistryDivergence is
	// how long a difference lasts before it is logged (0: 30 s).
	RegistryDigest     func() uint64
	RegistryDivergence time.Duration

	// LeaveSettle is how long Leave waits after the leave broadcast went
	// out, so it spreads before the process stops answering probes.
	LeaveSettle time.Duration

	// Memberlist timings, passed through to memberlist.Config; see its
	// documentation. DefaultConfig copies memberlist.DefaultLANConfig.
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	GossipInterval          time.Duration
	GossipNodes             int
	PushPullInterval        time.Duration
	TCPTimeout              time.Duration
	// UDPBufferSize is the largest packet sent; batches encoding larger go
	// over TCP instead.
	UDPBufferSize int

	// ---- security (see the package documentation) ----

	// Keys is the cluster keyring, primary first; each key is 16, 24 or 32
	// bytes (AES-128, -192, -256). memberlist encrypts and authenticates
	// every packet and stream with the primary and accepts any key of the
	// ring; the persistent streams present a TLS identity derived from the
	// primary and accept one derived from any key. Empty (and no KeyFile):
	// gossip is neither encrypted nor authenticated.
	Keys [][]byte
	// KeyFile, instead of Keys, is a file of base64 keys (ParseKeys),
	// primary first. It is re-read every KeyReloadInterval (0: only at
	// Start), so a key rotation (add the new key second everywhere, then
	// make it first, then remove the old) needs no restart.
	KeyFile           string
	KeyReloadInterval time.Duration
	// Label is memberlist's cluster label: packets and streams of another
	// label are discarded (and, with keys, it is authenticated data), so
	// two fleets that share a key or a network do not merge.
	Label string
	// TLSCertFile, TLSKeyFile and TLSCAFile (PEM) switch the persistent
	// streams to mutual TLS with the operator's certificates: a peer's
	// certificate must chain to the CA (no host-name check: peers are
	// dialled by IP; use a CA that signs only the fleet). They are read at
	// every handshake, so renewed files apply to the next connection.
	// memberlist itself still needs Keys to be authenticated.
	TLSCertFile, TLSKeyFile, TLSCAFile string
	// Insecure allows binding to a non-loopback address without keys:
	// anyone who reaches the ports can then join, read every in-flight
	// request and steer routing. Without it such a Config is invalid.
	Insecure bool

	// MaxInboundStreams bounds the concurrent inbound stream connections
	// (one per peer is normal); more are refused and counted.
	MaxInboundStreams int
	// StreamIdleTimeout closes an inbound stream that delivered no frame
	// for this long (a live peer sends a digest every AntiEntropyInterval).
	StreamIdleTimeout time.Duration
	// StreamFrameTimeout bounds the time from a frame's header to its last
	// byte. (The handshake is bounded by TCPTimeout, plus at most as long
	// again waiting for memberlist to announce a peer that dialled early.)
	StreamFrameTimeout time.Duration
	// MaxFrameBytes is the largest frame a stream accepts (a busy
	// replica's full state is the largest message); a larger header
	// closes the connection before anything is allocated, and a frame's
	// buffer grows only as its bytes arrive.
	MaxFrameBytes int

	// Logger receives the Node's logs and memberlist's own (re-levelled
	// from its "[LEVEL]" prefixes). Nil uses slog.Default().
	Logger *slog.Logger

	// wrapTransport, set by tests only, wraps memberlist's UDP/TCP
	// transport (to cut a node off the network without stopping it).
	wrapTransport func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport
}

// DefaultConfig returns production settings: memberlist's LAN timings,
// Dynamo's batching and a hostname-plus-nonce ReplicaID.
func DefaultConfig() Config {
	lan := memberlist.DefaultLANConfig()
	return Config{
		ReplicaID:               defaultReplicaID(),
		BindAddr:                "0.0.0.0",
		BindPort:                7946,
		RejoinInterval:          30 * time.Second,
		BatchMaxEvents:          DefaultBatchMaxEvents,
		BatchInterval:           DefaultBatchInterval,
		QueueSize:               100_000,
		PeerQueueSize:           4096,
		InboxSize:               8192,
		GapTimeout:              100 * time.Millisecond,
		AntiEntropyInterval:     5 * time.Second,
		RepairTimeout:           10 * time.Second,
		SinkTimeout:             2 * time.Second,
		LeaveSettle:             time.Second,
		ProbeInterval:           lan.ProbeInterval,
		ProbeTimeout:            lan.ProbeTimeout,
		SuspicionMult:           lan.SuspicionMult,
		SuspicionMaxTimeoutMult: lan.SuspicionMaxTimeoutMult,
		GossipInterval:          lan.GossipInterval,
		GossipNodes:             lan.GossipNodes,
		PushPullInterval:        lan.PushPullInterval,
		TCPTimeout:              lan.TCPTimeout,
		UDPBufferSize:           lan.UDPBufferSize,
		KeyReloadInterval:       10 * time.Second,
		MaxInboundStreams:       256,
		StreamIdleTimeout:       time.Minute,
		StreamFrameTimeout:      30 * time.Second,
		MaxFrameBytes:           64 << 20,
	}
}

// LocalTestConfig returns settings for tests of failure handling on one
// machine: loopback, a random port and timings about ten times faster
// than the LAN preset. They are slack enough for the tests' light load
// under -race, not for a loaded process: a replica that cannot answer a
// probe within 80 ms is suspected and, unless it refutes within 300 ms,
// declared dead (a 3-replica kvbench fleet at 64 qps on the project's
// busy 2-core machine saw 44 to 73 suspicions and 1 to 21 false deaths in
// 20 s with these timings, none with DefaultConfig's).
func LocalTestConfig() Config {
	c := DefaultConfig()
	c.BindAddr = "127.0.0.1"
	c.BindPort = 0
	c.RejoinInterval = time.Second
	c.GapTimeout = 50 * time.Millisecond
	c.AntiEntropyInterval = 200 * time.Millisecond
	c.RepairTimeout = 2 * time.Second
	c.LeaveSettle = 50 * time.Millisecond
	c.ProbeInterval = 100 * time.Millisecond
	c.ProbeTimeout = 80 * time.Millisecond
	c.SuspicionMult = 3
	c.SuspicionMaxTimeoutMult = 3
	c.GossipInterval = 20 * time.Millisecond
	c.PushPullInterval = 2 * time.Second
	c.TCPTimeout = time.Second
	c.KeyReloadInterval = time.Second
	c.StreamIdleTimeout = 10 * time.Second
	c.StreamFrameTimeout = 5 * time.Second
	return c
}

// FailureDetectionBound is an upper bound on how long memberlist takes to
// declare a silently failed member dead in a cluster of n members: a probe
// round plus its timeout, then the longest suspicion timeout (no peer
// confirming the suspicion).
func (c Config) FailureDetectionBound(n int) time.Duration {
	scale := math.Max(1, math.Log10(math.Max(1, float64(n))))
	suspicion := time.Duration(float64(c.SuspicionMult) * scale * float64(c.ProbeInterval))
	return 2*c.ProbeInterval + c.ProbeTimeout + time.Duration(c.SuspicionMaxTimeoutMult)*suspicion
}

func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "kvrouter"
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails on supported platforms
	return host + "-" + hex.EncodeToString(nonce[:])
}

// Validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.ReplicaID == "":
		return bad("ReplicaID is empty")
	case !utf8.ValidString(c.ReplicaID):
		return bad("ReplicaID is not UTF-8")
	case len(c.ReplicaID) > maxNameLen:
		return bad("ReplicaID is %d bytes, more than %d", len(c.ReplicaID), maxNameLen)
	case c.BindAddr == "":
		return bad("BindAddr is empty")
	case net.ParseIP(c.BindAddr) == nil:
		return bad("BindAddr %q is not an IP address", c.BindAddr)
	case c.BindPort < 0 || c.BindPort > math.MaxUint16:
		return bad("BindPort %d out of range", c.BindPort)
	case c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil:
		return bad("AdvertiseAddr %q is not an IP address", c.AdvertiseAddr)
	case c.AdvertisePort < 0 || c.AdvertisePort > math.MaxUint16:
		return bad("AdvertisePort %d out of range", c.AdvertisePort)
	case c.RejoinInterval < 0:
		return bad("RejoinInterval %v is negative", c.RejoinInterval)
	case CheckBatchMaxEvents(c.BatchMaxEvents) != nil:
		return bad("BatchMaxEvents %v", CheckBatchMaxEvents(c.BatchMaxEvents))
	case CheckBatchInterval(c.BatchInterval) != nil:
		return bad("BatchInterval %v", CheckBatchInterval(c.BatchInterval))
	case c.AckTimeout < 0:
		return bad("AckTimeout %v is negative", c.AckTimeout)
	case c.QueueSize < 1 || c.QueueSize > MaxQueueSize:
		return bad("QueueSize %d not in [1, %d]", c.QueueSize, MaxQueueSize)
	case c.PeerQueueSize < 1 || c.PeerQueueSize > MaxQueueSize:
		return bad("PeerQueueSize %d not in [1, %d]", c.PeerQueueSize, MaxQueueSize)
	case c.InboxSize < 1 || c.InboxSize > MaxQueueSize:
		return bad("InboxSize %d not in [1, %d]", c.InboxSize, MaxQueueSize)
	case c.GapTimeout <= 0:
		return bad("GapTimeout %v must be positive", c.GapTimeout)
	case c.AntiEntropyInterval <= 0:
		return bad("AntiEntropyInterval %v must be positive", c.AntiEntropyInterval)
	case c.RepairTimeout <= 0:
		return bad("RepairTimeout %v must be positive", c.RepairTimeout)
	case c.SinkTimeout <= 0:
		return bad("SinkTimeout %v must be positive", c.SinkTimeout)
	case c.LeaveSettle < 0:
		return bad("LeaveSettle %v is negative", c.LeaveSettle)
	case c.ProbeInterval <= 0 || c.ProbeTimeout <= 0:
		return bad("ProbeInterval %v and ProbeTimeout %v must be positive", c.ProbeInterval, c.ProbeTimeout)
	case c.ProbeTimeout > c.ProbeInterval:
		return bad("ProbeTimeout %v exceeds ProbeInterval %v", c.ProbeTimeout, c.ProbeInterval)
	case c.SuspicionMult < 1 || c.SuspicionMaxTimeoutMult < 1:
		return bad("SuspicionMult %d and SuspicionMaxTimeoutMult %d must be at least 1", c.SuspicionMult, c.SuspicionMaxTimeoutMult)
	case c.GossipInterval <= 0 || c.GossipNodes < 1:
		return bad("GossipInterval %v must be positive and GossipNodes %d at least 1", c.GossipInterval, c.GossipNodes)
	case c.PushPullInterval < 0:
		return bad("PushPullInterval %v is negative", c.PushPullInterval)
	case c.TCPTimeout <= 0:
		return bad("TCPTimeout %v must be positive", c.TCPTimeout)
	case c.UDPBufferSize < minUDPBufferSize || c.UDPBufferSize > 65_000:
		return bad("UDPBufferSize %d not in [%d, 65000]", c.UDPBufferSize, minUDPBufferSize)
	case c.MaxInboundStreams < 1 || c.MaxInboundStreams > MaxInboundStreamsLimit:
		return bad("MaxInboundStreams %d not in [1, %d]", c.MaxInboundStreams, MaxInboundStreamsLimit)
	case c.StreamIdleTimeout <= c.AntiEntropyInterval:
		return bad("StreamIdleTimeout %v must exceed AntiEntropyInterval %v (a live peer's stream carries a digest every interval)", c.StreamIdleTimeout, c.AntiEntropyInterval)
	case c.StreamFrameTimeout <= 0:
		return bad("StreamFrameTimeout %v must be positive", c.StreamFrameTimeout)
	case c.MaxFrameBytes < minFrameBytes || c.MaxFrameBytes > MaxFrameBytesLimit:
		return bad("MaxFrameBytes %d not in [%d, %d]", c.MaxFrameBytes, minFrameBytes, MaxFrameBytesLimit)
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	for _, j := range c.Join {
		if err := validateJoinEntry(j); err != nil {
			return bad("Join: %v", err)
		}
	}
	if _, err := encodeMeta(c.meta()); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func validateJoinEntry(j string) error {
	host, port, err := net.SplitHostPort(j)
	if err != nil {
		return fmt.Errorf("%q: %w", j, err)
	}
	if host == "" {
		return fmt.Errorf("%q: empty host", j)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > math.MaxUint16 {
		return fmt.Errorf("%q: bad port %q", j, port)
	}
	return nil
}

func (c Config) validateSecurity() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case len(c.Keys) > 0 && c.KeyFile != "":
		return bad("Keys and KeyFile are both set")
	case len(c.Keys) > maxKeys:
		return bad("%d Keys, more than %d", len(c.Keys), maxKeys)
	case c.KeyReloadInterval < 0:
		return bad("KeyReloadInterval %v is negative", c.KeyReloadInterval)
	case len(c.Label) > memberlist.LabelMaxSize:
		return bad("Label is %d bytes, more than %d", len(c.Label), memberlist.LabelMaxSize)
	case (c.TLSCertFile == "") != (c.TLSKeyFile == "") || (c.TLSCertFile == "") != (c.TLSCAFile == ""):
		return bad("TLSCertFile, TLSKeyFile and TLSCAFile go together (got %q, %q, %q)", c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile)
	}
	for i, k := range c.Keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return bad("Keys[%d]: %d bytes: %v", i, len(k), err)
		}
	}
	if !c.keyed() && !c.Insecure && !isLoopback(c.BindAddr) {
		return fmt.Errorf("%w: %w: BindAddr %s is not loopback and no Keys or KeyFile is set (set Insecure to accept that anyone who reaches the port can join)",
			ErrInvalidConfig, ErrInsecure, c.BindAddr)
	}
	return nil
}

// keyed reports whether memberlist gets a keyring.
func (c Config) keyed() bool { return len(c.Keys) > 0 || c.KeyFile != "" }

func isLoopback(ip string) bool {
	a := net.ParseIP(ip)
	return a != nil && a.IsLoopback()
}

// udpLimit is the largest encoded message sent as one UDP packet.
func (c Config) udpLimit() int {
	limit := c.UDPBufferSize - udpOverhead
	if c.keyed() {
		limit -= encryptOverhead
	}
	if c.Label != "" {
		limit -= 2 + len(c.Label)
	}
	return limit
}

func (c Config) meta() nodeMeta {
	// The stream key is filled in by Start; a placeholder of its size
	// makes Validate's meta size check exact.
	return nodeMeta{ReplicaID: c.ReplicaID, HTTPAddr: c.HTTPAddr, Version: c.Version,
		StreamVersion: streamProtocolVersion, StreamKey: base64.StdEncoding.EncodeToString(make([]byte, ed25519.PublicKeySize)),
		Sessions: true}
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// memberlistConfig translates c; the delegates and the metric labels are
// set by the caller. ring is nil for an unkeyed cluster; stats receives
// the refutations memberlist logs.
func (c Config) memberlistConfig(ring *memberlist.Keyring, stats *counters) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.ReplicaID
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if c.AdvertisePort == 0 {
		mc.AdvertisePort = c.BindPort // memberlist fills it in for BindPort 0
	}
	mc.ProbeInterval = c.ProbeInterval
	mc.ProbeTimeout = c.ProbeTimeout
	mc.SuspicionMult = c.SuspicionMult
	mc.SuspicionMaxTimeoutMult = c.SuspicionMaxTimeoutMult
	mc.GossipInterval = c.GossipInterval
	mc.GossipNodes = c.GossipNodes
	mc.PushPullInterval = c.PushPullInterval
	mc.TCPTimeout = c.TCPTimeout
	mc.UDPBufferSize = c.UDPBufferSize
	// Our payloads are protobuf-encoded random 64-bit hashes: compression
	// cannot shrink them, and LZW on every message was a fifth of the
	// cluster's CPU per decision.
	mc.EnableCompression = false
	mc.Keyring = ring // GossipVerifyIncoming/Outgoing stay true: nothing unencrypted in or out
	mc.Label = c.Label
	mc.Logger = newMemberlistLogger(c.logger(), stats)
	return mc
}
