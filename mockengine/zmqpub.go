package mockengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// ZMQPublisherConfig configures a vLLM-style ZMQ event publisher.
type ZMQPublisherConfig struct {
	// Endpoint is rank 0's PUB address (vLLM default tcp://*:5557); rank
	// i uses port + i. With Connect the PUB dials it (a router in bind
	// mode), else it binds.
	Endpoint string
	Connect  bool
	// ReplayEndpoint is rank 0's replay ROUTER bind address (vLLM
	// convention tcp://*:5558); empty serves no replay.
	ReplayEndpoint string
	// PublicEndpoint and PublicReplayEndpoint are announced in
	// heartbeats; empty means the bound address with a wildcard host
	// replaced by the host name.
	PublicEndpoint       string
	PublicReplayEndpoint string
	DPSize               int
	Topic                string
	Encoding             zmqevents.Encoding
	BlockSize            int
	// ReplayBuffer is the number of batches kept per rank for replay
	// (vLLM buffer_steps, default 10 000).
	ReplayBuffer int
	// Tokens returns the token ids of a Stored event's blocks. When nil,
	// tokens come from an engine attached with TapEngine.
	Tokens func(ev *kv.Event) ([]uint32, error)
	// Heartbeats, when set, carries heartbeats (NATS); the ZMQ endpoints
	// are added to them.
	Heartbeats Publisher
	// Wire selects the engine form of the events (vLLM's plain form by
	// default): LoRA block pool, EAGLE pairs, SGLang pages, an unknown
	// event type, a block size mismatch.
	Wire ZMQWire
	// DropSeq is a test hook: a batch it selects is numbered and kept for
	// replay but not sent, as if the PUB socket dropped it.
	DropSeq func(rank uint32, seq uint64) bool
	Logger  *slog.Logger
}

// ErrNoTokens is returned for a Stored event whose token ids are unknown:
// the vLLM format carries tokens, not just hashes.
var ErrNoTokens = errors.New("token ids of stored blocks are unknown")

// ZMQPublisher publishes KV events in vLLM's wire format: per DP rank a
// PUB socket sending [topic, seq, msgpack EventBatch] and a ROUTER socket
// replaying the last ReplayBuffer batches. It implements Publisher.
type ZMQPublisher struct {
	cfg   ZMQPublisherConfig
	log   *slog.Logger
	ranks []*zmqRank

	stashMu sync.Mutex
	stash   map[stashKey][]uint32 // tokens captured by TapEngine

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type stashKey struct {
	rank    uint32
	eventID uint64
}

// zmqRank is one rank's publisher process as vLLM would run it.
type zmqRank struct {
	rank   uint32
	pub    zmq4.Socket
	router zmq4.Socket // nil without replay

	mu   sync.Mutex // seq, ring and sends on pub
	seq  uint64
	ring replayRing
}

// NewZMQPublisher binds (or connects) every rank's sockets.
func NewZMQPublisher(cfg ZMQPublisherConfig) (*ZMQPublisher, error) {
	if cfg.DPSize <= 0 {
		cfg.DPSize = 1
	}
	if cfg.ReplayBuffer <= 0 {
		cfg.ReplayBuffer = 10_000
	}
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("%w: zmq publisher block size %d must be positive", ErrInvalidConfig, cfg.BlockSize)
	}
	if err := cfg.Wire.validate(cfg.BlockSize); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &ZMQPublisher{cfg: cfg, log: cfg.Logger.With("component", "mockengine"), stash: make(map[stashKey][]uint32), cancel: cancel}
	zlog := slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	for i := range cfg.DPSize {
		r := &zmqRank{rank: uint32(i), ring: newReplayRing(cfg.ReplayBuffer)}
		p.ranks = append(p.ranks, r)
		ep, err := zmqevents.OffsetEndpoint(cfg.Endpoint, i)
		if err != nil {
			p.Close()
			return nil, err
		}
		r.pub = zmq4.NewPub(ctx, zmq4.WithLogger(zlog))
		if cfg.Connect {
			err = r.pub.Dial(ep)
		} else {
			err = r.pub.Listen(strings.Replace(ep, "://*:", "://0.0.0.0:", 1))
		}
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("kv events socket of rank %d at %s: %w", i, ep, err)
		}
		if cfg.ReplayEndpoint == "" {
			continue
		}
		rep, err := zmqevents.OffsetEndpoint(cfg.ReplayEndpoint, i)
		if err != nil {
			p.Close()
			return nil, err
		}
		r.router = zmq4.NewRouter(ctx, zmq4.WithLogger(zlog))
		if err := r.router.Listen(strings.Replace(rep, "://*:", "://0.0.0.0:", 1)); err != nil {
			p.Close()
			return nil, fmt.Errorf("replay socket of rank %d at %s: %w", i, rep, err)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serveReplay(ctx, r)
		}()
	}
	return p, nil
}

// Close closes every socket and stops the replay servers.
func (p *ZMQPublisher) Close() error {
	p.cancel()
	for _, r := range p.ranks {
		if r.pub != nil {
			r.pub.Close()
		}
		if r.router != nil {
			r.router.Close()
		}
	}
	p.wg.Wait()
	return nil
}

// Endpoint is rank 0's announced PUB address; ReplayEndpoint its replay
// address ("" without replay).
func (p *ZMQPublisher) Endpoint() string {
	return announced(p.cfg.PublicEndpoint, p.cfg.Endpoint, p.ranks[0].pub)
}

// ReplayEndpoint is rank 0's announced replay address.
func (p *ZMQPublisher) ReplayEndpoint() string {
	if p.ranks[0].router == nil {
		return ""
	}
	return announced(p.cfg.PublicReplayEndpoint, p.cfg.ReplayEndpoint, p.ranks[0].router)
}

// announced is the configured public address, else the bound one with a
// wildcard host replaced by the host name.
func announced(public, configured string, s zmq4.Socket) string {
	if public != "" {
		return public
	}
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok || addr == nil {
		return configured
	}
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
		if name, err := os.Hostname(); err == nil && name != "" {
			host = name
		}
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(addr.Port))
}

// Restart simulates an engine process restart: every rank's sequence
// starts again at 0 and the replay buffers are emptied.
func (p *ZMQPublisher) Restart() {
	for _, r := range p.ranks {
		r.mu.Lock()
		r.seq = 0
		r.ring = newReplayRing(p.cfg.ReplayBuffer)
		r.mu.Unlock()
	}
}

// RestartRank simulates the restart of one data-parallel rank's engine
// process: its sequence starts again at 0 and its replay buffer is
// emptied; the other ranks go on.
func (p *ZMQPublisher) RestartRank(rank uint32) error {
	if int(rank) >= len(p.ranks) {
		return fmt.Errorf("%w: rank %d, the publisher has %d", ErrBadDpRank, rank, len(p.ranks))
	}
	r := p.ranks[rank]
	r.mu.Lock()
	r.seq = 0
	r.ring = newReplayRing(p.cfg.ReplayBuffer)
	r.mu.Unlock()
	return nil
}

// PublishHeartbeat implements Publisher: it adds the ZMQ endpoints and
// forwards to the heartbeat publisher, if any.
func (p *ZMQPublisher) PublishHeartbeat(ctx context.Context, hb Heartbeat) error {
	if p.cfg.Heartbeats == nil {
		return ctx.Err()
	}
	hb.KVEventsEndpoint, hb.ReplayEndpoint = p.Endpoint(), p.ReplayEndpoint()
	return p.cfg.Heartbeats.PublishHeartbeat(ctx, hb)
}

// PublishEvent implements Publisher: one event per batch, numbered by its
// rank's sequence.
func (p *ZMQPublisher) PublishEvent(ctx context.Context, ev *kv.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if int(ev.Worker.DpRank) >= len(p.ranks) {
		return fmt.Errorf("%w: kv event of rank %d, the publisher has %d", ErrBadDpRank, ev.Worker.DpRank, len(p.ranks))
	}
	raw, err := p.rawEvent(ev)
	if err != nil {
		return fmt.Errorf("kv event %d of rank %d: %w", ev.EventID, ev.Worker.DpRank, err)
	}
	events := []zmqevents.RawEvent{raw}
	if ev.Kind == kv.EventStored {
		events = p.cfg.Wire.stored(raw)
	}
	if t := p.cfg.Wire.UnknownEventType; t != "" {
		events = append([]zmqevents.RawEvent{{UnknownType: t}}, events...)
	}
	batch := zmqevents.Batch{
		Timestamp: float64(time.Now().UnixNano()) / 1e9, Events: events,
		HasDPRank: true, DPRank: ev.Worker.DpRank,
	}
	payload, err := zmqevents.EncodeBatch(&batch, p.cfg.Encoding)
	if err != nil {
		return err
	}
	r := p.ranks[ev.Worker.DpRank]
	r.mu.Lock()
	defer r.mu.Unlock()
	seq := r.seq
	r.seq++
	r.ring.push(seq, payload)
	if p.cfg.DropSeq != nil && p.cfg.DropSeq(r.rank, seq) {
		return nil
	}
	msg := zmq4.NewMsgFrom([]byte(p.cfg.Topic), zmqevents.EncodeSeq(seq), payload)
	if err := r.pub.SendMulti(msg); err != nil {
		return fmt.Errorf("send kv event batch %d of rank %d: %w", seq, r.rank, err)
	}
	return nil
}

// Subscribed reports whether a subscription matching the publisher's
// topic has reached the rank's PUB socket. A SUB socket's subscription
// arrives after its handshake, and a PUB drops what it sends to nobody
// (ZMQ's slow joiner), so a batch published before Subscribed is true
// may be heard by no one. Tests use it to publish a batch that must be
// heard; the engine itself never waits for subscribers, as vLLM's does not.
func (p *ZMQPublisher) Subscribed(rank uint32) bool {
	if int(rank) >= len(p.ranks) {
		return false
	}
	topics, ok := p.ranks[rank].pub.(zmq4.Topics)
	if !ok {
		return false
	}
	for _, t := range topics.Topics() {
		if strings.HasPrefix(p.cfg.Topic, t) {
			return true
		}
	}
	return false
}

// mediumOfTier is vLLM's medium string of a tier.
func mediumOfTier(t kv.StorageTier) string {
	switch t {
	case kv.TierHostPinned:
		return "CPU"
	case kv.TierDisk:
		return "DISK"
	case kv.TierExternal:
		return "EXTERNAL"
	case kv.TierShared:
		return "SHARED"
	}
	return "GPU"
}

func (p *ZMQPublisher) rawEvent(ev *kv.Event) (zmqevents.RawEvent, error) {
	raw := zmqevents.RawEvent{Kind: ev.Kind, Medium: mediumOfTier(ev.Tier)}
	switch ev.Kind {
	case kv.EventStored:
		tokens, err := p.tokensOf(ev)
		if err != nil {
			return raw, err
		}
		if len(tokens) != len(ev.Blocks)*p.cfg.BlockSize {
			return raw, fmt.Errorf("%w: %d tokens for %d blocks of %d", ErrNoTokens, len(tokens), len(ev.Blocks), p.cfg.BlockSize)
		}
		raw.TokenIDs, raw.BlockSize = tokens, p.cfg.BlockSize
		raw.HasParent, raw.ParentHash = ev.HasParent, uint64(ev.ParentHash)
		raw.BlockHashes = make([]uint64, len(ev.Blocks))
		for i, b := range ev.Blocks {
			raw.BlockHashes[i] = uint64(b.BlockHash)
		}
	case kv.EventRemoved:
		raw.BlockHashes = make([]uint64, len(ev.Removed))
		for i, h := range ev.Removed {
			raw.BlockHashes[i] = uint64(h)
		}
	case kv.EventCleared:
		raw.Medium = ""
	default:
		return raw, fmt.Errorf("unknown event kind %d", ev.Kind)
	}
	return raw, nil
}

func (p *ZMQPublisher) tokensOf(ev *kv.Event) ([]uint32, error) {
	if p.cfg.Tokens != nil {
		return p.cfg.Tokens(ev)
	}
	k := stashKey{ev.Worker.DpRank, ev.EventID}
	p.stashMu.Lock()
	tokens, ok := p.stash[k]
	delete(p.stash, k)
	p.stashMu.Unlock()
	if !ok {
		return nil, ErrNoTokens
	}
	return tokens, nil
}

// TapEngine makes the publisher learn the token ids of the engine's
// Stored events as they are emitted: kv.Event carries only hashes, and
// the vLLM format needs the tokens. Call it before the engine runs.
func (p *ZMQPublisher) TapEngine(e *Engine) {
	for _, rr := range e.ranks {
		r := rr.rank
		next := r.emit
		r.emit = func(ev kv.Event) {
			if ev.Kind == kv.EventStored {
				if tokens := storedTokens(r, &ev); tokens != nil {
					p.stashMu.Lock()
					p.stash[stashKey{ev.Worker.DpRank, ev.EventID}] = tokens
					p.stashMu.Unlock()
				}
			}
			next(ev)
		}
	}
}

// storedTokens finds the running sequence whose newly stored blocks the
// event announces (it runs inside storeFullBlocks, before s.stored moves
// on) and copies their tokens.
func storedTokens(r *Rank, ev *kv.Event) []uint32 {
	if len(ev.Blocks) == 0 {
		return nil
	}
	first := kv.SequenceHash(ev.Blocks[0].BlockHash)
	bs := r.cfg.BlockSize
	for _, s := range r.running {
		for i := s.stored; i < len(s.hashes); i++ {
			end := (i + len(ev.Blocks)) * bs
			if s.hashes[i] == first && end <= len(s.tokens) {
				return slices.Clone(s.tokens[i*bs : end])
			}
		}
	}
	return nil
}

// serveReplay answers replay requests [identity, "", start_seq] with
// every buffered batch from start_seq on, then the end marker.
func (p *ZMQPublisher) serveReplay(ctx context.Context, r *zmqRank) {
	for {
		msg, err := r.router.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			p.log.Debug("replay receive failed", "dp_rank", r.rank, "err", err)
			continue
		}
		f := msg.Frames
		if len(f) != 3 || len(f[1]) != 0 {
			p.log.Warn("ignoring malformed replay request", "dp_rank", r.rank, "frames", len(f))
			continue
		}
		start, err := zmqevents.DecodeSeq(f[2])
		if err != nil {
			p.log.Warn("ignoring malformed replay request", "dp_rank", r.rank, "err", err)
			continue
		}
		id := f[0]
		r.mu.Lock()
		entries := r.ring.since(start)
		r.mu.Unlock()
		for _, e := range entries {
			if err := r.router.SendMulti(zmq4.NewMsgFrom(id, nil, zmqevents.EncodeSeq(e.seq), e.payload)); err != nil {
				p.log.Debug("replay send failed", "dp_rank", r.rank, "err", err)
				break
			}
		}
		if err := r.router.SendMulti(zmq4.NewMsgFrom(id, nil, zmqevents.EncodeSeq(zmqevents.EndSeq), nil)); err != nil {
			p.log.Debug("replay end marker send failed", "dp_rank", r.rank, "err", err)
		}
	}
}

type replayEntry struct {
	seq     uint64
	payload []byte
}

// replayRing keeps the last cap batches in publication order.
type replayRing struct {
	entries []replayEntry
	head    int // index of the oldest entry once full
	full    bool
}

func newReplayRing(capacity int) replayRing {
	return replayRing{entries: make([]replayEntry, 0, capacity)}
}

func (q *replayRing) push(seq uint64, payload []byte) {
	if !q.full {
		q.entries = append(q.entries, replayEntry{seq, payload})
		q.full = len(q.entries) == cap(q.entries)
		return
	}
	q.entries[q.head] = replayEntry{seq, payload}
	q.head = (q.head + 1) % len(q.entries)
}

// since copies the entries with seq >= start, oldest first.
func (q *replayRing) since(start uint64) []replayEntry {
	ordered := append(slices.Clone(q.entries[q.head:]), q.entries[:q.head]...)
	i, _ := slices.BinarySearchFunc(ordered, start, func(e replayEntry, s uint64) int {
		switch {
		case e.seq < s:
			return -1
		case e.seq > s:
			return 1
		}
		return 0
	})
	return ordered[i:]
}
