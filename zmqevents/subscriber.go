package zmqevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/internal/redial"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/trust"
)

// Options configures how subscribers deliver events.
type Options struct {
	// BlockSize is the router's block size (required).
	BlockSize int
	// Handler receives every index event. Calls for one worker are
	// serialised and in order; different workers call it concurrently.
	// The event is only valid during the call.
	Handler func(*kv.Event)
	Logger  *slog.Logger
	// ReplayTimeout bounds one replay request (default 5 s).
	ReplayTimeout time.Duration
	// RetryInterval paces a bound socket's receive retries and is the
	// first reconnect wait when Redial.Base is unset (default 250 ms).
	RetryInterval time.Duration
	// Redial spaces one rank's reconnects in connect mode: exponential
	// backoff with jitter after every failed dial, failed handshake or
	// dropped connection (default redial.DefaultPolicy, Base =
	// RetryInterval).
	Redial redial.Policy
	// Limiter caps connection attempts across every rank that shares it
	// (a Manager's subscribers share one); nil: no shared cap.
	Limiter *redial.Limiter
	// Waits, when set, hears each rank's current backoff (the gauge of
	// the longest).
	Waits *redial.Waits
	// HandshakeTimeout bounds a connection's ZMTP handshake (default
	// 5 s): a publisher that accepts and never answers is a failed
	// handshake, redialled on the backoff.
	HandshakeTimeout time.Duration
	// OnReconnect, when set, is told the reason (ReconnectReason.String)
	// of every reconnect a rank waits out. Ranks call it concurrently; it
	// must not block.
	OnReconnect func(reason string)
	// OnDrop, when set, is told the reason (Reason.String) of every
	// frame, batch or event skipped, and of every LoRA event indexed
	// under LoraIDNamespace, so they are counted with the router's other
	// dropped events (kvrouter_kv_events_dropped_total{reason}). Ranks
	// call it concurrently; it must not block.
	OnDrop func(reason string)
	// Trust hears of each rank's gaps and replays (index trust); nil: nobody.
	Trust trust.StreamObserver
}

func (o Options) withDefaults() (Options, error) {
	if o.BlockSize <= 0 {
		return o, fmt.Errorf("zmqevents: block size %d must be positive", o.BlockSize)
	}
	if o.Handler == nil {
		return o, errors.New("zmqevents: nil handler")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ReplayTimeout <= 0 {
		o.ReplayTimeout = 5 * time.Second
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = 250 * time.Millisecond
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 5 * time.Second
	}
	if o.Redial == (redial.Policy{}) {
		o.Redial = redial.DefaultPolicy()
		o.Redial.Base = o.RetryInterval
		o.Redial.Max = max(o.Redial.Max, o.Redial.Base)
	}
	if err := o.Redial.Validate(); err != nil {
		return o, fmt.Errorf("zmqevents: %w", err)
	}
	if o.Trust == nil {
		o.Trust = trust.NopStreamObserver{}
	}
	return o, nil
}

// Stats counts what subscribers saw. Fields add up across workers.
type Stats struct {
	Messages     uint64 // batches received live
	Events       uint64 // raw engine events decoded
	StoredBlocks uint64 // blocks in Stored events delivered to the handler
	Malformed    uint64 // frames or events dropped as malformed
	Duplicates   uint64 // live batches already applied from a replay
	Replays      uint64 // replay requests answered
	ReplayErrors uint64 // replay requests that failed or timed out
	Replayed     uint64 // batches applied from replays
	Lost         uint64 // sequence numbers neither received nor replayed (at most MaxSeqGap per jump)
	Restarts     uint64 // sequence went backwards (or jumped past MaxSeqGap), or a verifying replay showed a different batch: the engine restarted
	Connections  uint64 // SUB connections established (handshakes); more than the ranks means reconnects
	// Reconnects counts the waits before redialling, by reason.
	Reconnects    [numReconnectReasons]uint64
	RefSuppressed uint64 // duplicate stores/removals absorbed by RefCounter
	// Reasons counts skipped events (and frames) by reason; Malformed is
	// the sum of the reasons that are input errors (Reason.IsError).
	Reasons [NumReasons]uint64
}

func (s *Stats) add(o Stats) {
	s.Messages += o.Messages
	s.Events += o.Events
	s.StoredBlocks += o.StoredBlocks
	s.Malformed += o.Malformed
	s.Duplicates += o.Duplicates
	s.Replays += o.Replays
	s.ReplayErrors += o.ReplayErrors
	s.Replayed += o.Replayed
	s.Lost += o.Lost
	s.Restarts += o.Restarts
	s.Connections += o.Connections
	s.RefSuppressed += o.RefSuppressed
	for i := range s.Reasons {
		s.Reasons[i] += o.Reasons[i]
	}
	for i := range s.Reconnects {
		s.Reconnects[i] += o.Reconnects[i]
	}
}

type counters struct {
	messages, events, storedBlocks, malformed, duplicates   atomic.Uint64
	replays, replayErrors, replayed, lost, restarts, refSup atomic.Uint64
	connections                                             atomic.Uint64
	reasons                                                 [NumReasons]atomic.Uint64
	reconnects                                              [numReconnectReasons]atomic.Uint64
}

// MaxSeqGap is the largest forward jump of a rank's sequence number that
// counts as lost batches. An engine numbers its batches from 0 one by
// one, so a larger jump is no gap: live, it is handled as a restart (the
// worker is cleared and numbering starts again from the new sequence);
// in a replay, the loss is counted as MaxSeqGap. Either way a corrupt or
// hostile sequence number (a negative one is 2^64-1 as unsigned) cannot
// add nearly 2^64 to the lost counter and wrap it.
const MaxSeqGap = 1 << 32

// addLost counts the sequence numbers between next (expected) and seq
// (received, seq > next), at most MaxSeqGap.
func (c *counters) addLost(next, seq uint64) {
	c.lost.Add(min(seq-next, MaxSeqGap))
}

// Subscriber receives one worker's KV events: one SUB socket per DP rank.
type Subscriber struct {
	cfg  WorkerEndpoint
	opts Options
	conv Converter
	log  *slog.Logger
	c    counters

	mu   sync.Mutex // serialises RefCounter and Handler across ranks
	refs *RefCounter
	out  []kv.Event
	// fullBlocks records the ranks that have stored a block of the
	// router's size: a short single page from such a rank is SGLang's
	// short last page; from a rank that never sent one it is a block size
	// mismatch (an engine whose blocks are all smaller than the router's).
	fullBlocks map[uint32]bool

	// skipLogs rate-limits the WARN line of each reason.
	skipLogs [NumReasons]loglimit.Limiter
	// redialLogs rate-limits the line of each reconnect reason.
	redialLogs [numReconnectReasons]loglimit.Limiter

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartSubscriber validates cfg and starts receiving. In bind mode the
// listening sockets are open when it returns (a port in use is an error);
// in connect mode it keeps dialling in the background until Close.
func StartSubscriber(ctx context.Context, cfg WorkerEndpoint, opts Options) (*Subscriber, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Subscriber{
		cfg: cfg, opts: opts, conv: Converter{BlockSize: opts.BlockSize}, refs: NewRefCounter(), cancel: cancel,
		log:        opts.Logger.With("component", "zmqevents", "worker_id", uint64(cfg.WorkerID)),
		fullBlocks: map[uint32]bool{},
	}
	for i := range s.skipLogs {
		s.skipLogs[i].Every = skipLogInterval
	}
	for i := range s.redialLogs {
		s.redialLogs[i].Every = skipLogInterval
	}
	streams := make([]*rankStream, cfg.ranks())
	for i := range streams {
		rs, err := s.newRankStream(ctx, i)
		if err != nil {
			cancel()
			for _, o := range streams[:i] {
				o.sock.Close()
			}
			return nil, err
		}
		streams[i] = rs
	}
	for _, rs := range streams {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			rs.run(ctx)
		}()
	}
	return s, nil
}

// Close stops every rank and waits for them; no Handler call happens
// after it returns.
func (s *Subscriber) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

// Endpoint is the configuration the subscriber was started with.
func (s *Subscriber) Endpoint() WorkerEndpoint { return s.cfg }

// Stats returns the subscriber's counters.
func (s *Subscriber) Stats() Stats {
	c := &s.c
	st := Stats{
		Messages: c.messages.Load(), Events: c.events.Load(), StoredBlocks: c.storedBlocks.Load(),
		Malformed: c.malformed.Load(), Duplicates: c.duplicates.Load(), Replays: c.replays.Load(),
		ReplayErrors: c.replayErrors.Load(), Replayed: c.replayed.Load(), Lost: c.lost.Load(),
		Restarts: c.restarts.Load(), RefSuppressed: c.refSup.Load(), Connections: c.connections.Load(),
	}
	for i := range st.Reasons {
		st.Reasons[i] = c.reasons[i].Load()
	}
	for i := range st.Reconnects {
		st.Reconnects[i] = c.reconnects[i].Load()
	}
	return st
}

// deliver converts a batch's events and passes what the RefCounter lets
// through to the handler. An event that cannot be indexed is skipped,
// counted and logged; the rest of the batch is applied.
func (s *Subscriber) deliver(m *Message, defaultRank uint32) {
	w := kv.WorkerWithDpRank{WorkerID: s.cfg.WorkerID, DpRank: defaultRank}
	if m.Batch.HasDPRank {
		w.DpRank = m.Batch.DPRank
	}
	s.c.events.Add(uint64(len(m.Batch.Events)))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range m.Batch.Events {
		raw := &m.Batch.Events[i]
		conv, err := s.conv.ConvertNoted(raw, w, m.Seq)
		if err != nil {
			reason := ReasonOf(err)
			if reason == ReasonShortLastPage && !s.fullBlocks[w.DpRank] {
				reason = ReasonBlockSizeMismatch
			}
			s.skip(reason, w.DpRank, m.Seq, err, skipDetails(reason, raw, s.opts.BlockSize)...)
			continue
		}
		if conv.Event.Kind == kv.EventCleared {
			// AllBlocksCleared carries no medium: the engine reset its
			// caches, every tier of this rank.
			s.clearRankLocked(w.DpRank, m.Seq)
			continue
		}
		if conv.LoraIDWithoutName {
			s.skip(ReasonLoraIDWithoutName, w.DpRank, m.Seq, nil, "lora_id", raw.LoraID)
		}
		if conv.LoraNameNotInExtraKeys {
			s.skip(ReasonLoraNameNotInExtraKeys, w.DpRank, m.Seq, nil, "lora_name", raw.LoraName)
		}
		if raw.Kind == kv.EventStored && raw.BlockSize == s.opts.BlockSize && !s.fullBlocks[w.DpRank] {
			if s.fullBlocks == nil {
				s.fullBlocks = map[uint32]bool{}
			}
			s.fullBlocks[w.DpRank] = true
		}
		s.emitLocked(&conv.Event)
	}
}

// skipLogInterval bounds each reason's WARN line to one per interval per
// worker; the counters count every occurrence.
const skipLogInterval = 10 * time.Second

// skip counts one skipped (or, for ReasonLoraIDWithoutName, specially
// indexed) event and logs it at WARN, rate-limited per reason.
func (s *Subscriber) skip(reason Reason, rank uint32, seq uint64, err error, details ...any) {
	s.c.reasons[reason].Add(1)
	if reason.IsError() {
		s.c.malformed.Add(1)
	}
	if s.opts.OnDrop != nil {
		s.opts.OnDrop(reason.String())
	}
	ok, suppressed := s.skipLogs[reason].Allow(time.Now())
	if !ok {
		return
	}
	msg := "skipped a kv event"
	switch reason {
	case ReasonLoraIDWithoutName:
		msg = "indexed a LoRA kv event under its lora_id: no query will match it"
	case ReasonLoraNameNotInExtraKeys:
		msg = "indexed a LoRA kv event whose extra_keys do not start with its adapter name: no adapter query will match it"
	}
	attrs := append([]any{"dp_rank", rank, "reason", reason.String(), "seq", seq}, details...)
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	s.log.Warn(msg, attrs...)
}

// skipDetails names what the operator needs to fix a reason's cause.
func skipDetails(reason Reason, raw *RawEvent, blockSize int) []any {
	switch reason {
	case ReasonUnknownEventType:
		return []any{"type", raw.UnknownType}
	case ReasonBlockSizeMismatch, ReasonShortLastPage:
		return []any{"expected_block_size", blockSize, "seen_block_size", raw.BlockSize}
	case ReasonUnknownMedium:
		return []any{"medium", raw.Medium}
	}
	return nil
}

// clearWorker tells the index that one rank's caches are empty on every
// tier: a Cleared event names the (worker, dp_rank) it clears, and only
// that rank restarted. The other ranks' blocks, sequences and replay
// state are untouched.
func (s *Subscriber) clearWorker(rank uint32, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clearRankLocked(rank, seq)
}

// clearRankLocked emits a Cleared of the rank on every tier, so the
// RefCounter forgets the rank's copies on each (the index empties the
// rank on every tier whichever tier a Cleared names, as Dynamo does).
func (s *Subscriber) clearRankLocked(rank uint32, seq uint64) {
	delete(s.fullBlocks, rank)
	for tier := range kv.NumTiers {
		ev := kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: s.cfg.WorkerID, DpRank: rank}, EventID: seq,
			Kind: kv.EventCleared, Tier: tier}
		s.emitLocked(&ev)
	}
}

func (s *Subscriber) emitLocked(ev *kv.Event) {
	before := s.refs.Suppressed
	s.out = s.refs.Filter(ev, s.out[:0])
	s.c.refSup.Add(s.refs.Suppressed - before)
	for i := range s.out {
		s.c.storedBlocks.Add(uint64(len(s.out[i].Blocks)))
		s.opts.Handler(&s.out[i])
	}
	clear(s.out) // do not pin the events' slices
}

// rankStream follows one rank's publisher.
type rankStream struct {
	s              *Subscriber
	rank           uint32
	endpoint       string
	replayEndpoint string
	sock           zmq4.Socket
	watch          *connWatch

	started  bool   // next is meaningful
	next     uint64 // next sequence number to apply
	haveLive bool
	lastLive uint64 // last sequence number received on the SUB socket
	// lastPayload fingerprints the payload applied as next-1, so a gap
	// can be told apart from a restart the SUB socket did not see.
	lastPayload uint64
	// liveConns is the socket's handshake count at the last live batch:
	// a higher count means the batch came over a new connection.
	liveConns uint64
}

func (s *Subscriber) newRankStream(ctx context.Context, i int) (*rankStream, error) {
	ep, _ := OffsetEndpoint(s.cfg.Endpoint, i) // validated
	rs := &rankStream{s: s, rank: s.cfg.DPStartRank + uint32(i), endpoint: ep}
	if s.cfg.ReplayEndpoint != "" {
		rs.replayEndpoint, _ = OffsetEndpoint(s.cfg.ReplayEndpoint, i) // validated
	}
	rs.watch = &connWatch{total: &s.c.connections}
	if !s.cfg.Bind {
		return rs, nil // connect mode: a socket per connection, made by run
	}
	rs.sock = rs.newSocket(ctx)
	if err := rs.sock.Listen(listenAddress(ep)); err != nil {
		rs.sock.Close()
		return nil, fmt.Errorf("worker %d rank %d: listen on %s: %w", s.cfg.WorkerID, rs.rank, ep, err)
	}
	return rs, nil
}

// dialTimeout bounds one TCP connect to a publisher.
const dialTimeout = 5 * time.Second

// newSocket is a SUB socket on the stream's topic that never redials by
// itself: zmq4's automatic reconnect redials at once, with no backoff, as
// soon as a connection drops, so a publisher that accepts and closes
// would be dialled in a tight loop. connectLoop paces it instead.
func (rs *rankStream) newSocket(ctx context.Context) zmq4.Socket {
	s := rs.s
	sock := zmq4.NewSub(ctx, zmq4.WithLogger(slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)), zmq4.WithSecurity(rs.watch),
		zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(dialTimeout), zmq4.WithAutomaticReconnect(false))
	// zmq4's SetOption only records the value: it cannot fail.
	_ = sock.SetOption(zmq4.OptionSubscribe, s.cfg.Topic)
	return sock
}

func (rs *rankStream) run(ctx context.Context) {
	if !rs.s.cfg.Bind {
		rs.connectLoop(ctx)
		return
	}
	defer rs.sock.Close()
	log := rs.s.log.With("dp_rank", rs.rank, "endpoint", rs.endpoint)
	rs.catchUp(ctx)
	for {
		msg, err := rs.sock.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// One publisher's connection dropped; the listener stays.
			log.Debug("kv event receive failed", "err", err)
			if redial.Sleep(ctx, rs.s.opts.RetryInterval) != nil {
				return
			}
			continue
		}
		rs.onLive(ctx, msg.Frames)
	}
}

// catchUp replays what a late router missed, as far as the engine's
// replay buffer reaches back.
func (rs *rankStream) catchUp(ctx context.Context) {
	if rs.replayEndpoint != "" {
		rs.replayFrom(ctx, 0)
	}
}

// connectLoop dials the publisher, receives until the connection drops
// and dials again, until ctx ends. Every redial waits out the rank's
// backoff (growing while dials fail or connections drop young) and the
// shared connection-rate cap, so no publisher, reachable or not, is
// dialled faster than the policy allows.
func (rs *rankStream) connectLoop(ctx context.Context) {
	o := &rs.s.opts
	b := &redial.Backoff{Policy: o.Redial, Waits: o.Waits}
	defer b.Close()
	wait := time.Duration(0)
	first := true
	for {
		if redial.Sleep(ctx, wait+o.Limiter.Reserve()) != nil {
			return
		}
		guard := &handshakeGuard{timeout: o.HandshakeTimeout}
		sock := rs.newSocket(withRawConn(ctx, guard.dialled))
		// Closing the socket is what stops a dial or a receive in
		// progress when ctx ends; the guard's deadline stops a handshake
		// the publisher never answers.
		stop := context.AfterFunc(ctx, func() { sock.Close() })
		err := sock.Dial(dialEndpoint(rs.endpoint))
		if err != nil {
			stop()
			sock.Close()
			if ctx.Err() != nil {
				return
			}
			reason := ReconnectDialFailed
			if !isDialError(err) {
				reason = ReconnectHandshakeFailed
			}
			wait = b.Failed()
			rs.s.reconnect(reason, rs.rank, rs.endpoint, wait, b.Failures(), err)
			continue
		}
		guard.handshaken()
		b.Connected()
		up := time.Now()
		if first {
			rs.catchUp(ctx)
			first = false
		}
		err = rs.receive(ctx, sock)
		stop()
		sock.Close()
		if ctx.Err() != nil {
			return
		}
		wait = b.Dropped(time.Since(up))
		rs.s.reconnect(ReconnectConnectionLost, rs.rank, rs.endpoint, wait, b.Failures(), err)
	}
}

// receive applies live batches until the socket's connection drops (a
// SUB socket that does not reconnect by itself reports the drop as a
// receive error) or ctx ends.
func (rs *rankStream) receive(ctx context.Context, sock zmq4.Socket) error {
	for {
		msg, err := sock.Recv()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
		rs.onLive(ctx, msg.Frames)
	}
}

// isDialError tells a TCP connect that failed from a connection that was
// made but whose ZMTP handshake failed.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// reconnect counts and logs (rate-limited per reason) a wait before a
// redial.
func (s *Subscriber) reconnect(reason ReconnectReason, rank uint32, endpoint string, wait time.Duration, failures int, err error) {
	s.c.reconnects[reason].Add(1)
	if s.opts.OnReconnect != nil {
		s.opts.OnReconnect(reason.String())
	}
	ok, suppressed := s.redialLogs[reason].Allow(time.Now())
	if !ok {
		return
	}
	attrs := []any{"dp_rank", rank, "endpoint", endpoint, "reason", reason.String(), "backoff", wait, "failures_in_a_row", failures}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	s.log.Warn("redialling kv event publisher after a backoff", attrs...)
}

// ReconnectReason is why a rank redials its publisher.
type ReconnectReason uint8

const (
	ReconnectDialFailed      ReconnectReason = iota // the TCP connect failed (refused, unreachable, timed out)
	ReconnectHandshakeFailed                        // connected, but the ZMTP handshake failed (not a ZMQ publisher, or it closed at once)
	ReconnectConnectionLost                         // an established connection dropped
	numReconnectReasons
)

// ReconnectReasons lists the reasons, for metrics.
var ReconnectReasons = []ReconnectReason{ReconnectDialFailed, ReconnectHandshakeFailed, ReconnectConnectionLost}

func (r ReconnectReason) String() string {
	switch r {
	case ReconnectDialFailed:
		return "dial_failed"
	case ReconnectHandshakeFailed:
		return "handshake_failed"
	case ReconnectConnectionLost:
		return "connection_lost"
	}
	return "unknown"
}

// onLive applies one live publication, repairing gaps by replay and
// detecting restarts by the sequence going back.
func (rs *rankStream) onLive(ctx context.Context, frames [][]byte) {
	c := &rs.s.c
	if len(frames) != 3 {
		rs.s.skip(ReasonMalformed, rs.rank, 0, malformed("%d frames, want 3 (topic, seq, payload)", len(frames)))
		return
	}
	seq, err := DecodeSeq(frames[1])
	if err != nil {
		rs.s.skip(ReasonMalformed, rs.rank, 0, err)
		return
	}
	c.messages.Add(1)
	conns := rs.watch.handshakes.Load()
	reconnected := rs.haveLive && conns != rs.liveConns
	rs.liveConns = conns
	if rs.haveLive && (seq <= rs.lastLive || seq-rs.lastLive-1 > MaxSeqGap) {
		c.restarts.Add(1)
		rs.s.log.Info("kv event sequence went back or jumped: engine restarted", "dp_rank", rs.rank, "seq", seq, "last", rs.lastLive)
		rs.s.clearWorker(rs.rank, seq)
		// A restarted engine numbers from 0 again: what it published
		// before seq is lost or replayable. A sequence too far from 0
		// for that starts a new numbering at seq.
		rs.started, rs.next = true, 0
		if seq > MaxSeqGap {
			rs.next = seq
		}
	}
	rs.haveLive, rs.lastLive = true, seq
	switch {
	case rs.started && seq < rs.next:
		c.duplicates.Add(1)
		return
	case rs.started && (seq > rs.next || reconnected && seq == rs.next && seq > 0):
		// A batch that follows a reconnect continues the old sequence
		// only if the engine did not restart meanwhile: a new process
		// that published exactly as many batches as the old one before
		// the socket reconnected is caught by the same check as a gap,
		// the replayed batch at next-1 being a different one.
		if seq > rs.next {
			rs.s.opts.Trust.GapOpened(rs.id(), seq-rs.next)
		}
		if rs.replayEndpoint != "" {
			rs.repairGap(ctx)
		}
		if seq < rs.next { // the replay already covered this batch
			c.duplicates.Add(1)
			return
		}
		if seq > rs.next {
			c.addLost(rs.next, seq)
		}
	}
	rs.started, rs.next = true, seq+1
	rs.apply(seq, frames[0], frames[2])
}

func (rs *rankStream) apply(seq uint64, topic, payload []byte) {
	rs.lastPayload = xxh3.Hash(payload)
	b, err := DecodeBatch(payload)
	if err != nil {
		rs.s.skip(ReasonOf(err), rs.rank, seq, fmt.Errorf("whole batch: %w", err))
		return
	}
	rs.s.deliver(&Message{Topic: string(topic), Seq: seq, Batch: b}, rs.rank)
}

// replayFrom asks the engine's replay socket for every buffered batch from
// start on and applies those not applied yet, in order.
func (rs *rankStream) replayFrom(ctx context.Context, start uint64) {
	c := &rs.s.c
	holes := false
	if rs.waitReplaySlot(ctx) != nil {
		return
	}
	err := Replay(ctx, rs.replayEndpoint, start, rs.s.opts.ReplayTimeout, func(seq uint64, payload []byte) error {
		if rs.started && seq < rs.next {
			return nil
		}
		if rs.started && seq > rs.next {
			c.addLost(rs.next, seq)
			holes = true
		}
		rs.started, rs.next = true, seq+1
		c.replayed.Add(1)
		rs.apply(seq, nil, payload)
		return nil
	})
	if err != nil {
		c.replayErrors.Add(1)
		if ctx.Err() == nil {
			rs.s.log.Warn("kv event replay failed", "dp_rank", rs.rank, "from_seq", start, "err", err)
			rs.s.opts.Trust.ReplayFailed(rs.id(), "replay_error")
		}
		return
	}
	rs.reportReplay(holes)
	c.replays.Add(1)
	if !rs.started { // an empty buffer: the engine has published nothing yet
		rs.started, rs.next = true, start
	}
}

// errRestarted stops a verifying replay whose first batch is not the one
// applied last.
var errRestarted = errors.New("replayed batch differs from the one applied: the engine restarted")

// repairGap replays what the SUB socket missed. It asks from the last
// applied batch and checks that batch is unchanged: when the engine
// restarted and published past the old sequence before the SUB socket
// reconnected, the sequence never goes back, but the batch at that number
// is a different one. Then the worker is cleared and replayed from 0.
func (rs *rankStream) repairGap(ctx context.Context) {
	if rs.next == 0 {
		rs.replayFrom(ctx, 0)
		return
	}
	verify := rs.next - 1
	c := &rs.s.c
	holes := false
	if rs.waitReplaySlot(ctx) != nil {
		return
	}
	err := Replay(ctx, rs.replayEndpoint, verify, rs.s.opts.ReplayTimeout, func(seq uint64, payload []byte) error {
		switch {
		case seq == verify:
			if xxh3.Hash(payload) != rs.lastPayload {
				return errRestarted
			}
			return nil
		case seq < rs.next:
			return nil
		case seq > rs.next:
			c.addLost(rs.next, seq)
			holes = true
		}
		rs.next = seq + 1
		c.replayed.Add(1)
		rs.apply(seq, nil, payload)
		return nil
	})
	switch {
	case errors.Is(err, errRestarted):
		c.replays.Add(1)
		c.restarts.Add(1)
		rs.s.log.Info("kv event replay shows a different batch: engine restarted", "dp_rank", rs.rank, "seq", verify)
		rs.s.clearWorker(rs.rank, verify)
		rs.next = 0
		rs.replayFrom(ctx, 0)
	case err != nil:
		c.replayErrors.Add(1)
		if ctx.Err() == nil {
			rs.s.log.Warn("kv event replay failed", "dp_rank", rs.rank, "from_seq", verify, "err", err)
			rs.s.opts.Trust.ReplayFailed(rs.id(), "replay_error")
		}
	default:
		rs.reportReplay(holes)
		c.replays.Add(1)
	}
}

// waitReplaySlot takes a token of the shared connection-rate cap before a
// replay dials the engine's replay socket: a publisher whose every batch
// opens a gap makes the rank replay per batch, and those dials count
// against the same cap as redials.
func (rs *rankStream) waitReplaySlot(ctx context.Context) error {
	return redial.Sleep(ctx, rs.s.opts.Limiter.Reserve())
}

// id names the rank for index trust.
func (rs *rankStream) id() kv.WorkerWithDpRank {
	return kv.WorkerWithDpRank{WorkerID: rs.s.cfg.WorkerID, DpRank: rs.rank}
}

// reportReplay tells index trust how a replay that answered ended: with
// holes (the engine's buffer did not reach back) the rank's index still
// misses events.
func (rs *rankStream) reportReplay(holes bool) {
	if holes {
		rs.s.opts.Trust.ReplayFailed(rs.id(), "replay_incomplete")
		return
	}
	rs.s.opts.Trust.ReplayCompleted(rs.id())
}
