package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/kv"
)

// ProtobufContentType marks a protobuf KvEventBatch payload; so does the
// subject suffix ".pb".
const ProtobufContentType = "application/x-protobuf"

// EventSourceConfig configures KV-event ingestion.
type EventSourceConfig struct {
	Subject string // e.g. kvrouter.kv_events (protobuf on Subject+".pb")
	// Stream, when non-empty, keeps events in a JetStream stream (created
	// if absent) and reads them through an ordered consumer from the
	// first message: a replica that starts late replays history, then
	// follows live, in order, without duplicates. Every replica has its
	// own consumer, so every replica sees every event (not a queue group).
	Stream string
	MaxAge time.Duration
	// StartSeq, when non-zero, starts the stream consumer at that sequence
	// (after loading a snapshot that reflects everything before it).
	StartSeq uint64
	Log      *slog.Logger
}

// EventStats are the ingestion counters.
type EventStats struct {
	Messages  uint64            // NATS messages received
	Events    uint64            // events decoded and handed on
	Malformed map[string]uint64 // dropped messages by reason
	Gaps      uint64            // event ids skipped (per worker rank)
	Reordered uint64            // event ids not above the last seen (replay or restart)
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
	limiter logLimiter

	sub   *nats.Subscription
	extra *nats.Subscription // the ".>" suffix subjects (protobuf)
	cc    jetstream.ConsumeContext
	mode  string

	ready      atomic.Bool
	readySeq   uint64 // stream sequence that marks "caught up"
	messages   atomic.Uint64
	decoded    atomic.Uint64
	gaps       atomic.Uint64
	reordered  atomic.Uint64
	lastSeq    atomic.Uint64 // last stream sequence handed on
	streamGaps atomic.Uint64

	mu        sync.Mutex
	malformed map[string]uint64
	lastID    map[kv.WorkerWithDpRank]uint64
}

// StartEventSource subscribes. The handler is called from one goroutine
// at a time, in arrival order; it must not block for long (the router's
// ApplyEvent only enqueues to an actor).
func StartEventSource(ctx context.Context, nc *nats.Conn, cfg EventSourceConfig, handler func(*kv.Event)) (*EventSource, error) {
	if cfg.Subject == "" {
		return nil, errors.New("event source: subject is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &EventSource{
		cfg: cfg, handler: handler, log: cfg.Log, limiter: logLimiter{every: time.Second},
		malformed: map[string]uint64{}, lastID: map[kv.WorkerWithDpRank]uint64{},
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
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe %s: %w", cfg.Subject, err)
	}
	// Both subscriptions deliver on their own goroutines; the handler
	// contract (one at a time) is kept by the mutex in onMsg's callee.
	s.sub, s.mode = exact, "subscription"
	s.extra = sub
	s.ready.Store(true)
	return s, nil
}

func (s *EventSource) startJetStream(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:      s.cfg.Stream,
		Subjects:  []string{s.cfg.Subject, s.cfg.Subject + ".>"},
		MaxAge:    s.cfg.MaxAge,
		Storage:   jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy,
	})
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", s.cfg.Stream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s info: %w", s.cfg.Stream, err)
	}
	s.readySeq = info.State.LastSeq
	if s.readySeq == 0 || info.State.Msgs == 0 || s.readySeq < s.cfg.StartSeq {
		s.ready.Store(true)
	}
	occ := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if s.cfg.StartSeq > 0 {
		occ = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: s.cfg.StartSeq}
		s.lastSeq.Store(s.cfg.StartSeq - 1)
	}
	cons, err := stream.OrderedConsumer(ctx, occ)
	if err != nil {
		return fmt.Errorf("ordered consumer on %s: %w", s.cfg.Stream, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, mdErr := m.Metadata()
		if mdErr == nil {
			if last := s.lastSeq.Load(); last > 0 && md.Sequence.Stream > last+1 {
				s.streamGaps.Add(md.Sequence.Stream - last - 1)
				s.log.Error("KV event stream skipped messages (purged by a snapshot before this replica read them)",
					"from", last+1, "to", md.Sequence.Stream-1)
			}
		}
		s.handle(m.Subject(), m.Headers(), m.Data())
		if mdErr == nil {
			s.lastSeq.Store(md.Sequence.Stream)
		}
		if !s.ready.Load() && mdErr == nil && (md.Sequence.Stream >= s.readySeq || md.NumPending == 0) {
			s.ready.Store(true)
			s.log.Info("KV event replay caught up", "stream", s.cfg.Stream, "seq", md.Sequence.Stream)
		}
	})
	if err != nil {
		return fmt.Errorf("consume %s: %w", s.cfg.Stream, err)
	}
	s.cc, s.mode = cc, "jetstream"
	return nil
}

func (s *EventSource) onMsg(m *nats.Msg) { s.handle(m.Subject, m.Header, m.Data) }

// handle decodes one message and hands its events on. It serialises
// callers, so the handler sees events one at a time.
func (s *EventSource) handle(subject string, hdr nats.Header, data []byte) {
	s.messages.Add(1)
	var evs []kv.Event
	var err error
	if strings.HasSuffix(subject, ".pb") || hdr.Get("Content-Type") == ProtobufContentType {
		evs, err = events.DecodeProto(data)
	} else {
		evs, err = events.DecodeRouterEventsJSON(data)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		reason := "json"
		if strings.HasSuffix(subject, ".pb") || hdr.Get("Content-Type") == ProtobufContentType {
			reason = "protobuf"
		}
		s.malformed[reason]++
		if ok, suppressed := s.limiter.allow(time.Now()); ok {
			s.log.Debug("dropped malformed KV event", "subject", subject, "bytes", len(data), "err", err, "suppressed", suppressed)
		}
		return
	}
	for i := range evs {
		s.track(&evs[i])
		s.decoded.Add(1)
		s.handler(&evs[i])
	}
}

// track detects per-rank event-id gaps. The event is applied either way:
// a gap means lost events (the index may miss blocks until they are
// stored again or the worker is re-dumped), a step back means a replay
// or an engine restart (its Cleared event resets the worker).
func (s *EventSource) track(ev *kv.Event) {
	last, seen := s.lastID[ev.Worker]
	switch {
	case !seen:
	case ev.EventID > last+1:
		s.gaps.Add(ev.EventID - last - 1)
	case ev.EventID <= last:
		s.reordered.Add(1)
	}
	s.lastID[ev.Worker] = ev.EventID
}

// Ready reports whether the replay (if any) has caught up.
func (s *EventSource) Ready() bool { return s.ready.Load() }

// Mode is "jetstream" or "subscription".
func (s *EventSource) Mode() string { return s.mode }

// Stats returns a copy of the counters.
func (s *EventSource) Stats() EventStats {
	s.mu.Lock()
	mal := make(map[string]uint64, len(s.malformed))
	for k, v := range s.malformed {
		mal[k] = v
	}
	s.mu.Unlock()
	return EventStats{
		Messages: s.messages.Load(), Events: s.decoded.Load(), Malformed: mal,
		Gaps: s.gaps.Load(), Reordered: s.reordered.Load(), StreamGaps: s.streamGaps.Load(),
	}
}

// LastStreamSeq is the last stream sequence handed to the handler (0
// without JetStream).
func (s *EventSource) LastStreamSeq() uint64 { return s.lastSeq.Load() }

// Close stops the subscription.
func (s *EventSource) Close() {
	if s.cc != nil {
		s.cc.Stop()
	}
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	if s.extra != nil {
		_ = s.extra.Unsubscribe()
	}
}
