package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/trust"
)

// Defaults of the NATS names the router and the engines agree on.
const (
	DefaultEventsSubject  = "kvrouter.kv_events"
	DefaultWorkersSubject = "kvrouter.workers"
	DefaultStream         = "KVROUTER_KV_EVENTS"
	// DefaultMaxAge is how long the stream keeps events, as Dynamo's
	// JetStream mode (1 h): enough for a replica to restart and replay.
	DefaultMaxAge = time.Hour
	// DefaultMaxMsgs bounds the stream's messages: 4× Dynamo's
	// router_snapshot_threshold (1 M), past which a snapshot purges the
	// stream, so the bound only bites when no replica snapshots.
	DefaultMaxMsgs int64 = 4_000_000
	// DefaultMaxBytes bounds the stream's bytes: 4 GiB, about 3 M
	// single-event JSON messages of 16 blocks (~1.3 kB each), 3× what
	// the snapshot threshold lets accumulate.
	DefaultMaxBytes int64 = 4 << 30
)

// ProtobufContentType marks a protobuf KvEventBatch payload; so does the
// subject suffix ".pb".
const ProtobufContentType = "application/x-protobuf"

// ProtobufSuffix is appended to the events subject for protobuf payloads.
const ProtobufSuffix = ".pb"

// Modes of an EventSource.
const (
	ModeJetStream    = "jetstream"
	ModeSubscription = "subscription"
)

// EventSourceConfig configures KV-event ingestion.
type EventSourceConfig struct {
	// Subject carries JSON RouterEvents; Subject+".pb" (or any message
	// with header Content-Type: application/x-protobuf) carries protobuf
	// KvEventBatches. Empty means DefaultEventsSubject.
	Subject string
	// Stream, when non-empty, keeps events in a JetStream stream (created
	// if absent) and reads them through an ordered consumer from the
	// first message: a replica that starts late replays history, then
	// follows live, in order, without duplicates. Every replica has its
	// own consumer, so every replica sees every event (not a queue group).
	// Empty, or a server without JetStream, means a plain subscription
	// that sees only events published from now on.
	Stream string
	// MaxAge, MaxMsgs and MaxBytes bound the stream: 0 means
	// DefaultMaxAge, DefaultMaxMsgs, DefaultMaxBytes; negative means no
	// limit. Past a bound the oldest events are discarded (a replica that
	// had not read them counts StreamGaps); index snapshots keep the
	// stream well below the bounds while a replica takes them.
	MaxAge   time.Duration
	MaxMsgs  int64
	MaxBytes int64
	// StartSeq, when non-zero, starts the stream consumer at that sequence
	// (after loading a snapshot that reflects everything before it).
	StartSeq uint64
	Log      *slog.Logger
	// OnDrop, when set, is told the reason of every event a decoded
	// message carried but the source did not hand on (an event of an
	// unknown type: events.ReasonUnknownEventType), so it is counted
	// with the router's other dropped events.
	OnDrop func(reason string)
	// Trust hears of each rank's event-id gaps (index trust); nil: nobody.
	Trust trust.StreamObserver
}

func (c *EventSourceConfig) applyDefaults() {
	if c.Subject == "" {
		c.Subject = DefaultEventsSubject
	}
	switch {
	case c.MaxAge == 0:
		c.MaxAge = DefaultMaxAge
	case c.MaxAge < 0:
		c.MaxAge = 0 // JetStream's "unlimited"
	}
	c.MaxMsgs = streamLimit(c.MaxMsgs, DefaultMaxMsgs)
	c.MaxBytes = streamLimit(c.MaxBytes, DefaultMaxBytes)
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// streamLimit maps a bound (0 = def, negative = none) onto JetStream's
// (-1 = none).
func streamLimit(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return -1
	}
	return v
}

// Reasons a message is counted malformed (EventStats.Malformed).
const (
	MalformedJSON     = "json"
	MalformedProtobuf = "protobuf"
	// MalformedEnvelope: a Dynamo event-plane envelope (JSON or
	// MessagePack) that is not exactly one, or whose payload is not
	// RouterEvents.
	MalformedEnvelope = "envelope"
)

// EventStats are the ingestion counters.
type EventStats struct {
	Messages  uint64            // NATS messages received
	Events    uint64            // events decoded and handed on
	Malformed map[string]uint64 // dropped messages by reason (MalformedJSON, MalformedProtobuf, MalformedEnvelope)
	// Skipped counts events left out of messages that were otherwise
	// applied, by reason (events.ReasonUnknownEventType).
	Skipped map[string]uint64
	// UnknownFields counts fields of applied messages that the decoder
	// does not use (a newer publisher's additions).
	UnknownFields uint64
	Gaps          uint64 // event ids skipped (per worker rank), at most MaxEventIDGap per event
	Reordered     uint64 // event ids not above the last seen (replay or restart) or past MaxEventIDGap above it
	// StreamGaps counts stream messages this replica never saw: purged by
	// a snapshot before it read them (it then lacks their effect until
	// the affected workers re-store those blocks or it restarts).
	StreamGaps uint64
}

// EventSource feeds decoded KV events to a handler.
type EventSource struct {
	cfg     EventSourceConfig
	handler func(*kv.Event)
	log     *slog.Logger
	// limits rate-limit the WARN line of dropped input, one per reason.
	limits map[string]*loglimit.Limiter

	sub   *nats.Subscription
	extra *nats.Subscription // the ".>" suffix subjects (protobuf)
	cc    jetstream.ConsumeContext
	mode  string
	done  chan struct{} // closed by Close; stops the replay watchdog
	wg    sync.WaitGroup

	ready      atomic.Bool
	readySeq   uint64 // stream sequence that marks "caught up"
	messages   atomic.Uint64
	decoded    atomic.Uint64
	gaps       atomic.Uint64
	reordered  atomic.Uint64
	lastSeq    atomic.Uint64 // last stream sequence handed on
	streamGaps atomic.Uint64

	// mu serialises the handler and guards what follows.
	mu        sync.Mutex
	closed    bool
	malformed map[string]uint64
	skipped   map[string]uint64
	unknown   uint64 // fields decoded messages carried and the decoder did not use
	lastID    map[kv.WorkerWithDpRank]uint64
}

// StartEventSource subscribes and delivers every decoded event to
// handler. The handler is called from one goroutine at a time, in
// arrival order, with an event it may keep; it must not block for long
// (it holds up ingestion: the router's ApplyEvent only enqueues to an
// actor). Malformed payloads are dropped and counted, never fatal.
func StartEventSource(ctx context.Context, nc *nats.Conn, cfg EventSourceConfig, handler func(*kv.Event)) (*EventSource, error) {
	if handler == nil {
		return nil, fmt.Errorf("event source on %s: handler is required", cfg.Subject)
	}
	cfg.applyDefaults()
	s := &EventSource{
		cfg: cfg, handler: handler, log: cfg.Log.With("component", "natsbus"), limits: map[string]*loglimit.Limiter{},
		done: make(chan struct{}), malformed: map[string]uint64{}, skipped: map[string]uint64{},
		lastID: map[kv.WorkerWithDpRank]uint64{},
	}
	if cfg.Stream != "" {
		err := s.startJetStream(ctx, nc)
		if err == nil {
			return s, nil
		}
		s.log.Warn("JetStream unavailable; KV events will not be replayed to late replicas", "err", err)
	}
	sub, err := nc.Subscribe(cfg.Subject+".>", s.onMsg)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s.>: %w", cfg.Subject, err)
	}
	exact, err := nc.Subscribe(cfg.Subject, s.onMsg)
	if err != nil {
		_ = sub.Unsubscribe() // best effort: the subscribe error below is what matters
		return nil, fmt.Errorf("subscribe %s: %w", cfg.Subject, err)
	}
	// Both subscriptions deliver on their own goroutines; the handler
	// contract (one at a time) is kept by the mutex in handle.
	s.sub, s.mode = exact, ModeSubscription
	s.extra = sub
	awaitSubscribed(nc, cfg.Subject, s.log)
	s.ready.Store(true)
	return s, nil
}

func (s *EventSource) onMsg(m *nats.Msg) { s.handle(m.Subject, m.Header, m.Data) }

func isProtobuf(subject string, hdr nats.Header) bool {
	return strings.HasSuffix(subject, ProtobufSuffix) || hdr.Get("Content-Type") == ProtobufContentType
}

// decode reads one message in whichever form it came: a protobuf
// KvEventBatch (by subject or header), Dynamo's MessagePack event-plane
// envelope (a MessagePack map; JSON starts otherwise), or JSON (a
// RouterEvent, an array of them, or the JSON envelope around either).
// On error it returns the malformed reason.
func decode(subject string, hdr nats.Header, data []byte) (events.Batch, string, error) {
	var b events.Batch
	var err error
	reason := MalformedJSON
	switch {
	case isProtobuf(subject, hdr):
		reason = MalformedProtobuf
		b, err = events.DecodeProtoBatch(data)
	case events.IsMsgpackMap(data):
		b, err = events.DecodeMsgpackEnvelope(data)
	default:
		b, err = events.DecodeRouterEventsBatchJSON(data)
	}
	if errors.Is(err, events.ErrEnvelope) {
		reason = MalformedEnvelope
	}
	return b, reason, err
}

// handle decodes one message and hands its events on. It serialises
// callers, so the handler sees events one at a time. A malformed message
// is dropped whole and counted by reason; events of a type the decoder
// does not know are left out, counted and reported to OnDrop, and the
// rest is handed on.
func (s *EventSource) handle(subject string, hdr nats.Header, data []byte) {
	s.messages.Add(1)
	b, reason, err := decode(subject, hdr, data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if err != nil {
		s.malformed[reason]++
		if ok, suppressed := s.limiter(reason).Allow(time.Now()); ok {
			// A malformed message may not say whose it is; the error names
			// the offending field.
			s.log.Warn("dropped malformed KV event message", "reason", reason, "subject", subject,
				"bytes", len(data), "err", err, "suppressed", suppressed)
		}
		return
	}
	// In the message's order: event ids are tracked as they were sent.
	next := 0
	for i := range b.Events {
		for ; next < len(b.Skipped) && b.Skipped[next].At <= i; next++ {
			s.skip(subject, &b.Skipped[next])
		}
		s.track(b.Events[i].Worker, b.Events[i].EventID)
		s.decoded.Add(1)
		s.handler(&b.Events[i])
	}
	for ; next < len(b.Skipped); next++ {
		s.skip(subject, &b.Skipped[next])
	}
	if b.UnknownFields > 0 {
		s.unknownFields(subject, &b)
	}
}

// unknownFields counts and logs the fields a message carried that the
// decoder does not use (called with mu held). The events were applied:
// a newer publisher's extra field must not drop its events, and must not
// go unseen either (it may change what an event means).
func (s *EventSource) unknownFields(subject string, b *events.Batch) {
	s.unknown += uint64(b.UnknownFields)
	if ok, suppressed := s.limiter("unknown_field").Allow(time.Now()); ok {
		attrs := []any{"fields", b.UnknownNames, "count", b.UnknownFields, "subject", subject, "suppressed", suppressed}
		if len(b.Events) > 0 {
			attrs = append(attrs, "worker", uint64(b.Events[0].Worker.WorkerID), "dp_rank", b.Events[0].Worker.DpRank)
		}
		s.log.Warn("KV event message has fields this router does not use; its events were applied without them", attrs...)
	}
}

// skip counts, reports and logs an event left out of a message (called
// with mu held).
func (s *EventSource) skip(subject string, sk *events.Skipped) {
	// The event was sent: its id still counts for gap detection.
	s.track(sk.Worker, sk.EventID)
	s.skipped[sk.Reason]++
	if s.cfg.OnDrop != nil {
		s.cfg.OnDrop(sk.Reason)
	}
	if ok, suppressed := s.limiter(sk.Reason).Allow(time.Now()); ok {
		s.log.Warn("skipped KV event", "reason", sk.Reason, "worker", uint64(sk.Worker.WorkerID),
			"dp_rank", sk.Worker.DpRank, "event_id", sk.EventID, "type", sk.Type, "subject", subject,
			"suppressed", suppressed)
	}
}

// limiter returns the rate limiter of one drop reason (called with mu
// held): one reason's flood must not hide another's first line.
func (s *EventSource) limiter(reason string) *loglimit.Limiter {
	l := s.limits[reason]
	if l == nil {
		l = &loglimit.Limiter{Every: time.Second}
		s.limits[reason] = l
	}
	return l
}

// track detects per-rank event-id gaps: each (worker, dp_rank) numbers its
// events on its own, and restarts on its own. The event is applied either way:
// a gap means lost events (the index may miss blocks until they are
// stored again or the worker is re-dumped), a step back means a replay
// or an engine restart (its Cleared event resets that rank; re-applying
// a Stored or Removed the index already reflects changes nothing). A
// jump forward of more than MaxEventIDGap is no gap either (see
// EventIDStep) and counts as a discontinuity, like a step back. After a
// discontinuity, ids are counted from the new one.
func (s *EventSource) track(w kv.WorkerWithDpRank, id uint64) {
	last, seen := s.lastID[w]
	if seen {
		if skipped, ok := EventIDStep(last, id); ok {
			s.gaps.Add(skipped)
			if skipped > 0 && s.cfg.Trust != nil {
				s.cfg.Trust.GapOpened(w, skipped)
			}
		} else {
			s.reordered.Add(1)
		}
	}
	s.lastID[w] = id
}

// MaxEventIDGap is the largest forward jump of a rank's event_id that
// counts as lost events. event_id is unsigned and JSON decoders read a
// negative one as its two's complement (-1 is 2^64-1), so a publisher
// with a signed or wrapped counter, or a hostile one, could otherwise
// add nearly 2^64 to the gap counter with one event and wrap it. No
// fleet loses 2^32 events of one rank between two it delivers.
const MaxEventIDGap = 1 << 32

// EventIDStep classifies event id after last, on the same rank: ok is
// true for a forward step of at most MaxEventIDGap+1, with skipped the
// ids in between (0 for last+1); anything else — a step back, a repeat,
// a larger jump — is a discontinuity (ok false). It never overflows,
// whatever the two ids are.
func EventIDStep(last, id uint64) (skipped uint64, ok bool) {
	if id <= last {
		return 0, false
	}
	skipped = id - last - 1 // id > last: no wrap
	if skipped > MaxEventIDGap {
		return 0, false
	}
	return skipped, true
}

// Ready reports whether the replay (if any) has caught up.
func (s *EventSource) Ready() bool { return s.ready.Load() }

// Mode is ModeJetStream or ModeSubscription.
func (s *EventSource) Mode() string { return s.mode }

// Stats returns a copy of the counters.
func (s *EventSource) Stats() EventStats {
	s.mu.Lock()
	mal := maps.Clone(s.malformed)
	skipped := maps.Clone(s.skipped)
	unknown := s.unknown
	s.mu.Unlock()
	return EventStats{
		Messages: s.messages.Load(), Events: s.decoded.Load(), Malformed: mal, Skipped: skipped, UnknownFields: unknown,
		Gaps: s.gaps.Load(), Reordered: s.reordered.Load(), StreamGaps: s.streamGaps.Load(),
	}
}

// LastStreamSeq is the last stream sequence handed to the handler (0
// without JetStream).
func (s *EventSource) LastStreamSeq() uint64 { return s.lastSeq.Load() }

// Close stops the subscription. When it returns the handler is not
// running and will not be called again. Safe to call twice.
func (s *EventSource) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	if s.cc != nil {
		s.cc.Stop()
	}
	// closed already keeps the handler from running; Unsubscribe fails only
	// when the connection is closed, which ended the subscriptions too.
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	if s.extra != nil {
		_ = s.extra.Unsubscribe()
	}
	s.wg.Wait()
}
