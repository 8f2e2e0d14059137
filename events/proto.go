package events

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// ToProto converts an event to its protobuf message.
func ToProto(ev *kv.Event) *messages.KvEvent {
	m := &messages.KvEvent{
		Worker:  &messages.WorkerRank{WorkerId: uint64(ev.Worker.WorkerID), DpRank: ev.Worker.DpRank},
		EventId: ev.EventID,
		Tier:    messages.StorageTier(ev.Tier),
	}
	switch ev.Kind {
	case kv.EventStored:
		// The packed form: two arrays rather than a message per block.
		hashes := make([]uint64, 2*len(ev.Blocks))
		s := &messages.BlockStored{BlockHashes: hashes[:len(ev.Blocks):len(ev.Blocks)], TokensHashes: hashes[len(ev.Blocks):]}
		if ev.HasParent {
			p := uint64(ev.ParentHash)
			s.ParentHash = &p
		}
		for i, b := range ev.Blocks {
			s.BlockHashes[i], s.TokensHashes[i] = uint64(b.BlockHash), uint64(b.TokensHash)
		}
		m.Data = &messages.KvEvent_Stored{Stored: s}
	case kv.EventRemoved:
		r := &messages.BlockRemoved{BlockHashes: make([]uint64, len(ev.Removed))}
		for i, h := range ev.Removed {
			r.BlockHashes[i] = uint64(h)
		}
		m.Data = &messages.KvEvent_Removed{Removed: r}
	case kv.EventCleared:
		m.Data = &messages.KvEvent_Cleared{Cleared: &messages.AllBlocksCleared{}}
	}
	return m
}

// FromProto converts and validates a protobuf event.
func FromProto(m *messages.KvEvent) (kv.Event, error) {
	var ev kv.Event
	err := FromProtoInto(m, &ev)
	return ev, err
}

// FromProtoInto is FromProto into ev, reusing the capacity of its Blocks
// and Removed (a shard decodes every event into one scratch event, so
// ingest allocates nothing there). On error ev holds a partial event.
func FromProtoInto(m *messages.KvEvent, ev *kv.Event) error {
	*ev = kv.Event{Blocks: ev.Blocks[:0], Removed: ev.Removed[:0]}
	if m == nil || m.Worker == nil {
		return malformed("protobuf event has no worker")
	}
	ev.Worker = kv.WorkerWithDpRank{WorkerID: kv.WorkerID(m.Worker.WorkerId), DpRank: m.Worker.DpRank}
	ev.EventID = m.EventId
	// Compared as the wire's int32: converting first would wrap 256 to
	// the device tier.
	if m.Tier < 0 || int64(m.Tier) >= int64(kv.NumTiers) {
		return malformed("protobuf event: unknown storage tier %d", m.Tier)
	}
	ev.Tier = kv.StorageTier(m.Tier)
	switch d := m.Data.(type) {
	case *messages.KvEvent_Stored:
		ev.Kind = kv.EventStored
		blocks, err := appendStoredBlocks(ev.Blocks, d.Stored) // rejects a nil body first
		if err != nil {
			return err
		}
		if d.Stored.ParentHash != nil {
			ev.HasParent, ev.ParentHash = true, kv.ExternalBlockHash(*d.Stored.ParentHash)
		}
		ev.Blocks = blocks
	case *messages.KvEvent_Removed:
		ev.Kind = kv.EventRemoved
		for _, h := range d.Removed.GetBlockHashes() { // a nil body is an empty one: Validate rejects it
			ev.Removed = append(ev.Removed, kv.ExternalBlockHash(h))
		}
	case *messages.KvEvent_Cleared:
		ev.Kind = kv.EventCleared
	default:
		if f, ok := unknownField(m.ProtoReflect().GetUnknown()); ok {
			// A oneof member this build does not know (a newer event
			// type) arrives as an unknown field beside no data.
			sk := Skipped{Worker: ev.Worker, EventID: ev.EventID, Type: fmt.Sprintf("field %d", f), Reason: ReasonUnknownEventType}
			return fmt.Errorf("%w: protobuf event: %w", ErrMalformed, &unknownEventError{skipped: sk})
		}
		return malformed("protobuf event for worker %s carries no data", ev.Worker)
	}
	if err := ev.Validate(); err != nil {
		return malformed("%v", err)
	}
	return nil
}

// DecodeProto decodes a KvEventBatch (a single event is a batch of one),
// strictly: an event of an unknown type fails it too
// (ErrUnknownEventType). Ingestion uses DecodeProtoBatch.
func DecodeProto(data []byte) ([]kv.Event, error) {
	b, err := DecodeProtoBatch(data)
	if err != nil {
		return nil, err
	}
	if len(b.Skipped) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, &unknownEventError{skipped: b.Skipped[0]})
	}
	return b.Events, nil
}

// DecodeProtoBatch decodes a KvEventBatch. A malformed entry fails the
// whole batch; an entry whose event type this build does not know (data
// is a oneof member added later) is left out and reported in Skipped,
// and the rest is applied.
func DecodeProtoBatch(data []byte) (Batch, error) {
	var batch messages.KvEventBatch
	if err := proto.Unmarshal(data, &batch); err != nil {
		return Batch{}, malformed("protobuf batch: %v", err)
	}
	b := Batch{Events: make([]kv.Event, 0, len(batch.Events))}
	for i, m := range batch.Events {
		ev, err := FromProto(m)
		if sk, ok := skippedOf(err); ok {
			sk.At = len(b.Events)
			b.Skipped = append(b.Skipped, sk)
			continue
		}
		if err != nil {
			return Batch{}, fmt.Errorf("batch entry %d: %w", i, err)
		}
		b.Events = append(b.Events, ev)
	}
	return b, nil
}

// unknownField returns the number of the first field in raw unknown
// field bytes that could be a oneof member of KvEvent's data (a message,
// numbered past the known ones); ok is false if there is none.
func unknownField(raw []byte) (protowire.Number, bool) {
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return 0, false
		}
		m := protowire.ConsumeFieldValue(num, typ, raw[n:])
		if m < 0 {
			return 0, false
		}
		if typ == protowire.BytesType && num > 6 {
			return num, true
		}
		raw = raw[n+m:]
	}
	return 0, false
}

// EncodeProtoBatch encodes events as one KvEventBatch.
func EncodeProtoBatch(evs []kv.Event) ([]byte, error) {
	batch := &messages.KvEventBatch{Events: make([]*messages.KvEvent, len(evs))}
	for i := range evs {
		if err := evs[i].Validate(); err != nil {
			return nil, fmt.Errorf("encode event %d: %w", i, err)
		}
		batch.Events[i] = ToProto(&evs[i])
	}
	data, err := proto.Marshal(batch)
	if err != nil {
		return nil, fmt.Errorf("encode protobuf batch: %w", err)
	}
	return data, nil
}

// appendStoredBlocks appends a BlockStored's chain, from whichever form
// it uses, to dst.
func appendStoredBlocks(dst []kv.StoredBlock, s *messages.BlockStored) ([]kv.StoredBlock, error) {
	if s == nil {
		return dst, malformed("protobuf stored event has no body")
	}
	packed := len(s.BlockHashes) + len(s.TokensHashes)
	switch {
	case packed > 0 && len(s.Blocks) > 0:
		return dst, malformed("protobuf stored event carries both block forms (%d blocks, %d packed hashes)", len(s.Blocks), len(s.BlockHashes))
	case len(s.BlockHashes) != len(s.TokensHashes):
		return dst, malformed("protobuf stored event: %d block hashes but %d tokens hashes", len(s.BlockHashes), len(s.TokensHashes))
	case packed > 0:
		for i, h := range s.BlockHashes {
			dst = append(dst, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(h), TokensHash: kv.LocalBlockHash(s.TokensHashes[i])})
		}
		return dst, nil
	}
	for i, b := range s.Blocks {
		if b == nil {
			return dst, malformed("protobuf stored event: block %d is empty", i)
		}
		dst = append(dst, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(b.BlockHash), TokensHash: kv.LocalBlockHash(b.TokensHash)})
	}
	return dst, nil
}
