package natsbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// replayCheckEvery is how often a replaying source asks the server
// whether the messages it waits for still exist.
const replayCheckEvery = 250 * time.Millisecond

func (s *EventSource) startJetStream(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:      s.cfg.Stream,
		Subjects:  []string{s.cfg.Subject, s.cfg.Subject + ".>"},
		MaxAge:    s.cfg.MaxAge,
		MaxMsgs:   s.cfg.MaxMsgs,
		MaxBytes:  s.cfg.MaxBytes,
		Discard:   jetstream.DiscardOld, // a full stream drops its oldest events, never new ones
		Storage:   jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy,
	})
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", s.cfg.Stream, storageHint(err))
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
	cc, err := cons.Consume(s.onStreamMsg)
	if err != nil {
		return fmt.Errorf("consume %s: %w", s.cfg.Stream, err)
	}
	s.cc, s.mode = cc, ModeJetStream
	if !s.ready.Load() {
		s.wg.Add(1)
		go s.watchReplay(stream)
	}
	return nil
}

func (s *EventSource) onStreamMsg(m jetstream.Msg) {
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
		s.markReady("seq", md.Sequence.Stream)
	}
}

func (s *EventSource) markReady(args ...any) {
	if s.ready.CompareAndSwap(false, true) {
		s.log.Info("KV event replay caught up", append([]any{"stream", s.cfg.Stream}, args...)...)
	}
}

// watchReplay covers what the consumer cannot see: if the messages up
// to readySeq are purged (a snapshot) or expire before this source reads
// them, no delivered message ever reaches readySeq, so the source would
// stay unready until the next live event. Once the stream's first
// message is past readySeq, nothing older is left to replay.
func (s *EventSource) watchReplay(stream jetstream.Stream) {
	defer s.wg.Done()
	tick := time.NewTicker(replayCheckEvery)
	defer tick.Stop()
	for !s.ready.Load() {
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := stream.Info(ctx)
		cancel()
		if err != nil {
			s.log.Debug("stream info while replaying", "stream", s.cfg.Stream, "err", err)
			continue
		}
		if info.State.FirstSeq > s.readySeq {
			s.markReady("first_seq", info.State.FirstSeq, "reason", "older messages purged or expired")
		}
	}
}

// JetStream API error codes (nats-server's JSInsufficientResourcesErr and
// JSStorageResourcesExceededErr).
const (
	jsInsufficientResources jetstream.ErrorCode = 10023
	jsStorageExceeded       jetstream.ErrorCode = 10047
)

// storageHint explains JetStream's refusal to reserve a bound: a stream's
// or bucket's max bytes are reserved up front against the server's store
// limit (an embedded server's is 75% of the free disk).
func storageHint(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jsInsufficientResources || apiErr.ErrorCode == jsStorageExceeded) {
		return fmt.Errorf("%w (the stream's and the snapshot bucket's max bytes are reserved on the NATS server's store: lower --kv-events-max-bytes / --snapshot-max-bytes or give the server more storage)", err)
	}
	return err
}
