package events

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/kvrouter/kvrouter/kv"
)

// Dynamo's RouterEvent in JSON:
//
//	{"worker_id": 1, "storage_tier": "device",
//	 "event": {"event_id": 42, "dp_rank": 0,
//	   "data": {"stored": {"parent_hash": null, "start_position": null,
//	     "blocks": [{"block_hash": 1, "tokens_hash": 2, "mm_extra_info": null}]}}}}
//
// data is {"removed": {"block_hashes": [...]}}, "cleared" or
// {"cleared": {}} otherwise. Hashes are u64; negative numbers are i64
// reinterpreted bit for bit. dp_rank may be absent (0) or sit beside
// worker_id; the one inside event wins. null counts as absent. Other
// fields are checked as JSON and not used (docs/events.md lists the ones
// Dynamo sends). An event type other than stored, removed and cleared
// (a newer Dynamo's) is skipped, not fatal: see Batch.

// ErrMalformed wraps every decoding failure, so callers can count them.
var ErrMalformed = errors.New("malformed event")

// ErrUnknownEventType marks an event whose type the decoder does not know
// (one a newer engine or Dynamo version added), or whose residency domain
// it does not support. In a batch such an event is skipped and reported
// (Batch.Skipped, with the reason); the rest is applied.
var ErrUnknownEventType = errors.New("unknown event type")

// Drop-reason labels of skipped events.
const (
	// ReasonUnknownEventType: an event type the decoder does not know.
	ReasonUnknownEventType = "unknown_event_type"
	// ReasonUnsupportedResidencyDomain: a RouterEvent whose
	// residency_domain is not "worker" (Dynamo's "cache_owner", or a
	// newer one). A cache-owner residency belongs to a cache that outlives
	// the worker rank that published it; Dynamo itself never sends such
	// events to consumers that do not model cache owners, and indexing
	// them under the rank would credit it with blocks it may not hold.
	ReasonUnsupportedResidencyDomain = "unsupported_residency_domain"
)

// Skipped is an event of a batch the decoder left out, and why.
type Skipped struct {
	Worker  kv.WorkerWithDpRank // as far as the event said
	EventID uint64
	// Type is the event's type as sent: the JSON variant name, or
	// "field N" for a protobuf oneof member this build does not know.
	Type   string
	Reason string // ReasonUnknownEventType
	// At is how many of the batch's Events came before it, so a consumer
	// can see the message's events in their order (event ids, gaps).
	At int
}

// Batch is one decoded message: the events to apply, in order, and the
// ones skipped.
type Batch struct {
	Events  []kv.Event
	Skipped []Skipped
	// UnknownFields counts the object keys the decoder did not use
	// (fields a newer publisher added); UnknownNames holds the first few
	// distinct ones. The events are applied without them.
	UnknownFields int
	UnknownNames  []string
}

// withUnknown copies the scanner's unknown-key report into b.
func (b Batch) withUnknown(s *scanner) Batch {
	b.UnknownFields, b.UnknownNames = s.unknownKeys, s.unknownNames
	return b
}

// unknownEventError is the cause of an event skipped for its type.
type unknownEventError struct{ skipped Skipped }

func (e *unknownEventError) Error() string {
	if e.skipped.Reason == ReasonUnsupportedResidencyDomain {
		return fmt.Sprintf("unsupported: %s", e.skipped.Type)
	}
	return fmt.Sprintf("unknown event %q", e.skipped.Type)
}
func (e *unknownEventError) Unwrap() error { return ErrUnknownEventType }

// skippedOf returns the event an error skipped, if it is a skip.
func skippedOf(err error) (Skipped, bool) {
	var ue *unknownEventError
	if errors.As(err, &ue) {
		return ue.skipped, true
	}
	return Skipped{}, false
}

// errMissing is the cause of a required field's absence (null counts as
// absent); the pathError around it names the field.
var errMissing = errors.New("required field is missing")

func missing(field string) error { return &pathError{path: field, err: errMissing} }

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// pathError says which field of the document was wrong.
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

// at prefixes err with a field name; index paths ("[3]") attach without
// a dot.
func at(name string, err error) error {
	if err == nil {
		return nil
	}
	var pe *pathError
	if errors.As(err, &pe) {
		sep := "."
		if pe.path == "" || pe.path[0] == '[' { // "" is the empty key's name
			sep = ""
		}
		return &pathError{path: name + sep + pe.path, err: pe.err}
	}
	return &pathError{path: name, err: err}
}

// atKey and atIndex build the path only on failure: decoding must not
// allocate per field.
func atKey(key []byte, err error) error {
	if err == nil {
		return nil
	}
	return at(string(key), err)
}

func atIndex(i int, err error) error {
	if err == nil {
		return nil
	}
	return at("["+strconv.Itoa(i)+"]", err)
}

// finish turns a decoding failure into an ErrMalformed that names the
// field.
func finish(err error) error { return fmt.Errorf("%w: %w", ErrMalformed, err) }

// DecodeRouterEventJSON decodes one Dynamo RouterEvent and validates it.
func DecodeRouterEventJSON(data []byte) (kv.Event, error) {
	s := scanner{data: data}
	ev, err := s.routerEvent()
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return kv.Event{}, finish(err)
	}
	return ev, nil
}

// DecodeRouterEventsJSON decodes a JSON array of RouterEvents (a batch)
// or a single RouterEvent object, strictly: an event of an unknown type
// fails it too (ErrUnknownEventType). Ingestion uses
// DecodeRouterEventsBatchJSON, which skips such events.
func DecodeRouterEventsJSON(data []byte) ([]kv.Event, error) {
	b, err := DecodeRouterEventsBatchJSON(data)
	if err != nil {
		return nil, err
	}
	if len(b.Skipped) > 0 {
		return nil, finish(&unknownEventError{skipped: b.Skipped[0]})
	}
	return b.Events, nil
}

// DecodeRouterEventsBatchJSON decodes a JSON array of RouterEvents (a
// batch), a single RouterEvent object, or either inside Dynamo's event
// plane envelope (envelope.go). A malformed entry fails the whole batch,
// so a half-applied batch never reaches the index; an entry whose event
// type is unknown is left out and reported in Skipped, and the rest is
// applied.
func DecodeRouterEventsBatchJSON(data []byte) (Batch, error) {
	s := scanner{data: data}
	if s.peek() == '{' {
		if isEnvelopeJSON(data) {
			return decodeEnvelopeJSON(data)
		}
		ev, err := s.routerEvent()
		if err == nil {
			err = s.end()
		}
		if sk, ok := skippedOf(err); ok {
			return Batch{Events: []kv.Event{}, Skipped: []Skipped{sk}}.withUnknown(&s), nil
		}
		if err != nil {
			return Batch{}, finish(err)
		}
		return Batch{Events: []kv.Event{ev}}.withUnknown(&s), nil
	}
	var b Batch
	err := s.array(func(i int) error {
		ev, err := s.routerEvent()
		if sk, ok := skippedOf(err); ok {
			sk.At = len(b.Events)
			b.Skipped = append(b.Skipped, sk)
			return nil
		}
		if err != nil {
			return atIndex(i, err)
		}
		b.Events = append(b.Events, ev)
		return nil
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return Batch{}, finish(err)
	}
	if b.Events == nil {
		b.Events = []kv.Event{}
	}
	return b.withUnknown(&s), nil
}

// Bits of the keys a document has set, to refuse duplicates.
const (
	seenWorker = 1 << iota
	seenTier
	seenRank
	seenEvent
	seenEventID
	seenEventRank
	seenData
	seenParent
	seenBlocks
	seenBlockHash
	seenTokensHash
	seenBlockHashes
	seenDomain
)

// once refuses a second occurrence of a known key.
func once(seen *uint32, bit uint32, key []byte) error {
	if *seen&bit != 0 {
		return fmt.Errorf("key %q appears twice", key)
	}
	*seen |= bit
	return nil
}

// optU64 reads an integer or null (ok is false for null).
func (s *scanner) optU64() (v uint64, ok bool, err error) {
	if s.null() {
		return 0, false, nil
	}
	v, err = s.u64()
	return v, err == nil, err
}

func (s *scanner) routerEvent() (kv.Event, error) {
	var (
		ev                  kv.Event
		seen                uint32
		hasWorker, hasEvent bool
		topRank, rank       uint64
		hasTopRank, hasRank bool
		domain              string // residency_domain other than "worker"
	)
	s.unknownType = ""
	err := s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "worker_id":
			if err = once(&seen, seenWorker, key); err == nil {
				var id uint64
				id, hasWorker, err = s.optU64()
				ev.Worker.WorkerID = kv.WorkerID(id)
			}
		case "storage_tier":
			if err = once(&seen, seenTier, key); err == nil {
				ev.Tier, err = s.tier()
			}
		case "dp_rank":
			if err = once(&seen, seenRank, key); err == nil {
				topRank, hasTopRank, err = s.optU64()
			}
		case "event":
			if err = once(&seen, seenEvent, key); err == nil && !s.null() {
				hasEvent = true
				rank, hasRank, err = s.kvEvent(&ev)
			}
		case "residency_domain":
			if err = once(&seen, seenDomain, key); err == nil && !s.null() {
				var d []byte
				if d, err = s.str(); err == nil && string(d) != "worker" {
					domain = truncate(string(d))
				}
			}
		default:
			return s.unknownKey(key)
		}
		return atKey(key, err)
	})
	if err != nil {
		return kv.Event{}, err
	}
	if !hasWorker {
		return kv.Event{}, missing("worker_id")
	}
	if !hasEvent {
		return kv.Event{}, missing("event")
	}
	if !hasRank {
		rank, hasRank = topRank, hasTopRank
	}
	if hasRank && rank > 1<<32-1 {
		return kv.Event{}, &pathError{path: "dp_rank", err: fmt.Errorf("%d does not fit in uint32", rank)}
	}
	ev.Worker.DpRank = uint32(rank)
	if s.unknownType != "" {
		// The whole event was read: a batch can go on past it.
		sk := Skipped{Worker: ev.Worker, EventID: ev.EventID, Type: s.unknownType, Reason: ReasonUnknownEventType}
		s.unknownType = ""
		return kv.Event{}, &pathError{path: "event.data", err: &unknownEventError{skipped: sk}}
	}
	if domain != "" {
		sk := Skipped{Worker: ev.Worker, EventID: ev.EventID, Type: ev.Kind.String() + " in residency domain " + domain,
			Reason: ReasonUnsupportedResidencyDomain}
		return kv.Event{}, &pathError{path: "residency_domain", err: &unknownEventError{skipped: sk}}
	}
	if err := ev.Validate(); err != nil {
		return kv.Event{}, err
	}
	return ev, nil
}

func (s *scanner) tier() (kv.StorageTier, error) {
	if s.null() {
		return kv.TierDevice, nil
	}
	name, err := s.str()
	if err != nil {
		return 0, err
	}
	return kv.ParseStorageTier(string(name))
}

// kvEvent reads the "event" object into ev and returns its dp_rank.
func (s *scanner) kvEvent(ev *kv.Event) (rank uint64, hasRank bool, err error) {
	var seen uint32
	hasData := false
	err = s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "event_id":
			if err = once(&seen, seenEventID, key); err == nil {
				ev.EventID, _, err = s.optU64()
			}
		case "dp_rank":
			if err = once(&seen, seenEventRank, key); err == nil {
				rank, hasRank, err = s.optU64()
			}
		case "data":
			if err = once(&seen, seenData, key); err == nil && !s.null() {
				hasData = true
				err = s.eventData(ev)
			}
		default:
			return s.unknownKey(key)
		}
		return atKey(key, err)
	})
	if err == nil && !hasData {
		err = missing("data")
	}
	return rank, hasRank, err
}

// eventData reads the externally tagged event: "cleared", or an object
// with exactly one of stored, removed, cleared. Serde spells a variant
// without data as a string and one with data as a one-key object, so a
// string other than "cleared", or a one-key object with another key, is
// an event type this decoder does not know: its name is kept in
// s.unknownType (and its body checked as JSON) for routerEvent to skip
// the event.
func (s *scanner) eventData(ev *kv.Event) error {
	if s.peek() == '"' {
		name, err := s.str()
		if err != nil {
			return err
		}
		if string(name) != "cleared" && string(name) != "Cleared" {
			s.unknownType = truncate(string(name))
			return nil
		}
		ev.Kind = kv.EventCleared
		return nil
	}
	if s.peek() != '{' {
		return s.errorf("want \"cleared\" or an object")
	}
	members := 0
	err := s.object(func(key []byte) error {
		members++
		if members > 1 {
			return errors.New("must hold exactly one of stored, removed, cleared")
		}
		var err error
		switch string(key) {
		case "stored", "Stored":
			ev.Kind = kv.EventStored
			err = s.stored(ev)
		case "removed", "Removed":
			ev.Kind = kv.EventRemoved
			err = s.removed(ev)
		case "cleared", "Cleared":
			ev.Kind = kv.EventCleared
			err = s.skip()
		default:
			s.unknownType = truncate(string(key))
			err = s.skip()
		}
		return atKey(key, err)
	})
	if err == nil && members == 0 {
		err = errors.New("must hold exactly one of stored, removed, cleared")
	}
	return err
}

// minBlockJSON is the size of the smallest block object,
// {"block_hash":0,"tokens_hash":0}; it bounds how many blocks the rest of
// the input can hold, so the slice is allocated once.
const minBlockJSON = 32

func (s *scanner) stored(ev *kv.Event) error {
	var seen uint32
	return s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "parent_hash":
			if err = once(&seen, seenParent, key); err == nil {
				var p uint64
				p, ev.HasParent, err = s.optU64()
				ev.ParentHash = kv.ExternalBlockHash(p)
			}
		case "blocks":
			if err = once(&seen, seenBlocks, key); err == nil && !s.null() {
				ev.Blocks = make([]kv.StoredBlock, 0, min(16, (len(s.data)-s.pos)/minBlockJSON+1))
				err = s.array(func(i int) error {
					b, err := s.block()
					ev.Blocks = append(ev.Blocks, b)
					return atIndex(i, err)
				})
			}
		default:
			return s.unknownKey(key)
		}
		return atKey(key, err)
	})
}

func (s *scanner) block() (kv.StoredBlock, error) {
	var (
		b                  kv.StoredBlock
		seen               uint32
		hasBlock, hasToken bool
	)
	err := s.object(func(key []byte) error {
		var err error
		var v uint64
		switch string(key) {
		case "block_hash":
			if err = once(&seen, seenBlockHash, key); err == nil {
				v, hasBlock, err = s.optU64()
				b.BlockHash = kv.ExternalBlockHash(v)
			}
		case "tokens_hash":
			if err = once(&seen, seenTokensHash, key); err == nil {
				v, hasToken, err = s.optU64()
				b.TokensHash = kv.LocalBlockHash(v)
			}
		default:
			return s.unknownKey(key)
		}
		return atKey(key, err)
	})
	switch {
	case err != nil:
	case !hasBlock:
		err = missing("block_hash")
	case !hasToken:
		err = missing("tokens_hash")
	}
	return b, err
}

func (s *scanner) removed(ev *kv.Event) error {
	var seen uint32
	err := s.object(func(key []byte) error {
		if string(key) != "block_hashes" {
			return s.unknownKey(key)
		}
		err := once(&seen, seenBlockHashes, key)
		if err == nil && !s.null() {
			err = s.array(func(i int) error {
				h, err := s.u64()
				ev.Removed = append(ev.Removed, kv.ExternalBlockHash(h))
				return atIndex(i, err)
			})
		}
		return atKey(key, err)
	})
	// Always non-nil, so decoded events compare equal however the empty
	// list was spelled (absent, null or []).
	if ev.Removed == nil {
		ev.Removed = []kv.ExternalBlockHash{}
	}
	return err
}

// EncodeRouterEventJSON writes ev in Dynamo's RouterEvent shape, with the
// optional fields newer Dynamo versions emit (start_position,
// mm_extra_info) as null.
func EncodeRouterEventJSON(ev *kv.Event) ([]byte, error) {
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("encode router event: %w", err)
	}
	return AppendRouterEventJSON(make([]byte, 0, 128+96*len(ev.Blocks)+22*len(ev.Removed)), ev), nil
}

// AppendRouterEventJSON appends ev in Dynamo's RouterEvent shape to dst.
// ev must be valid (see kv.Event.Validate).
func AppendRouterEventJSON(dst []byte, ev *kv.Event) []byte {
	dst = append(dst, `{"worker_id":`...)
	dst = strconv.AppendUint(dst, uint64(ev.Worker.WorkerID), 10)
	dst = append(dst, `,"storage_tier":"`...)
	dst = append(dst, ev.Tier.String()...)
	dst = append(dst, `","event":{"event_id":`...)
	dst = strconv.AppendUint(dst, ev.EventID, 10)
	dst = append(dst, `,"dp_rank":`...)
	dst = strconv.AppendUint(dst, uint64(ev.Worker.DpRank), 10)
	dst = append(dst, `,"data":`...)
	switch ev.Kind {
	case kv.EventStored:
		dst = append(dst, `{"stored":{"parent_hash":`...)
		if ev.HasParent {
			dst = strconv.AppendUint(dst, uint64(ev.ParentHash), 10)
		} else {
			dst = append(dst, "null"...)
		}
		dst = append(dst, `,"start_position":null,"blocks":[`...)
		for i, b := range ev.Blocks {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"block_hash":`...)
			dst = strconv.AppendUint(dst, uint64(b.BlockHash), 10)
			dst = append(dst, `,"tokens_hash":`...)
			dst = strconv.AppendUint(dst, uint64(b.TokensHash), 10)
			dst = append(dst, `,"mm_extra_info":null}`...)
		}
		dst = append(dst, "]}}"...)
	case kv.EventRemoved:
		dst = append(dst, `{"removed":{"block_hashes":[`...)
		for i, h := range ev.Removed {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, uint64(h), 10)
		}
		dst = append(dst, "]}}"...)
	default:
		dst = append(dst, `"cleared"`...)
	}
	return append(dst, "}}"...)
}
