package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Dynamo's event plane wraps every published event in an envelope that
// carries the publisher's identity and sequence (lib/runtime, transports/
// event_plane). Its NATS transport writes it as JSON,
//
//	{"publisher_id": 7, "sequence": 42, "published_at": 1700000000000,
//	 "payload": [123, 34, 119, ...]}
//
// (NatsEnvelope: serde_json writes the payload bytes as an array of
// numbers), and the generic EventEnvelope adds "topic" first and newer
// versions "published_at_ns". The msgpack codec writes the same
// EventEnvelope as a MessagePack map with named keys (rmp_serde
// to_vec_named), the payload as binary. The payload is the published
// value itself: a RouterEvent (or an array of them), serialized as JSON
// or MessagePack by the same codec.
//
// An envelope is decoded exactly: every key is one of those above, the
// metadata keys are required, nothing else is accepted. Its payload is
// decoded like a message of its own, except that it may not be another
// envelope.

// ErrEnvelope wraps every failure to decode an event-plane envelope (a
// malformed event with reason "envelope").
var ErrEnvelope = errors.New("event-plane envelope")

// envelopeKeys are the keys a Dynamo event-plane envelope may hold.
var envelopeKeys = map[string]bool{
	"topic": true, "publisher_id": true, "sequence": true, "published_at": true,
	"published_at_ns": true, "payload": true,
}

// envelopeErr is a malformed envelope: it wraps ErrMalformed and
// ErrEnvelope.
func envelopeErr(format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s", ErrMalformed, ErrEnvelope, fmt.Sprintf(format, args...))
}

// isEnvelopeJSON reports whether a JSON object is an envelope rather than
// a RouterEvent, by its first key: serde writes struct fields in
// declaration order, and a RouterEvent begins with worker_id while an
// envelope begins with topic or publisher_id. Only the first key is read,
// so a RouterEvent costs nothing more to decode.
func isEnvelopeJSON(data []byte) bool {
	s := scanner{data: data}
	if s.peek() != '{' {
		return false
	}
	s.pos++
	if s.peek() != '"' {
		return false
	}
	key, err := s.str()
	return err == nil && envelopeKeys[string(key)]
}

// IsMsgpackMap reports whether data starts a MessagePack map (fixmap,
// map16, map32), as Dynamo's MessagePack envelope does: JSON starts with
// '{', '[' or space, and a protobuf batch travels on its own subject.
func IsMsgpackMap(data []byte) bool { return isMsgpackMap(data) }

func isMsgpackMap(data []byte) bool {
	return len(data) > 0 && (data[0]&0xf0 == 0x80 || data[0] == 0xde || data[0] == 0xdf)
}

// envelope is a decoded envelope's content.
type envelope struct {
	publisherID, sequence, publishedAt uint64
	payload                            []byte
}

// decodeEnvelopeJSON decodes a JSON envelope and the events of its payload.
func decodeEnvelopeJSON(data []byte) (Batch, error) {
	s := scanner{data: data}
	var (
		env                        envelope
		hasPub, hasSeq, hasAt, has bool
		seen                       = map[string]bool{}
	)
	err := s.object(func(key []byte) error {
		k := string(key)
		if !envelopeKeys[k] {
			return fmt.Errorf("unknown envelope field %q", truncate(k))
		}
		if seen[k] {
			return fmt.Errorf("key %q appears twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "topic":
			_, err = s.str()
		case "publisher_id":
			env.publisherID, err = s.u64()
			hasPub = true
		case "sequence":
			env.sequence, err = s.u64()
			hasSeq = true
		case "published_at":
			env.publishedAt, err = s.u64()
			hasAt = true
		case "published_at_ns":
			_, err = s.u64()
		case "payload":
			has = true
			env.payload = make([]byte, 0, (len(s.data)-s.pos)/4+1)
			err = s.array(func(i int) error {
				b, err := s.u64()
				if err == nil && b > 255 {
					err = fmt.Errorf("%d is not a byte", b)
				}
				env.payload = append(env.payload, byte(b))
				return atIndex(i, err)
			})
		}
		return atKey(key, err)
	})
	if err == nil {
		err = s.end()
	}
	if err == nil {
		err = requireEnvelope(hasPub, hasSeq, hasAt, has)
	}
	if err != nil {
		return Batch{}, envelopeErr("%v", err)
	}
	return decodePayload(env.payload)
}

func requireEnvelope(pub, seq, at, payload bool) error {
	switch {
	case !pub:
		return missing("publisher_id")
	case !seq:
		return missing("sequence")
	case !at:
		return missing("published_at")
	case !payload:
		return missing("payload")
	}
	return nil
}

// DecodeMsgpackEnvelope decodes Dynamo's event-plane EventEnvelope in
// MessagePack (named keys) and the events of its payload.
func DecodeMsgpackEnvelope(data []byte) (Batch, error) {
	if !isMsgpackMap(data) {
		return Batch{}, envelopeErr("not a MessagePack map")
	}
	if err := checkMsgpack(data); err != nil {
		return Batch{}, envelopeErr("%v", err)
	}
	r := bytes.NewReader(data) // a ByteScanner: the decoder reads no further than it needs
	dec := msgpack.NewDecoder(r)
	n, err := dec.DecodeMapLen()
	if err != nil {
		return Batch{}, envelopeErr("%v", err)
	}
	var (
		env                        envelope
		hasPub, hasSeq, hasAt, has bool
		seen                       = map[string]bool{}
	)
	for range n {
		k, err := dec.DecodeString()
		if err != nil {
			return Batch{}, envelopeErr("key: %v", err)
		}
		if !envelopeKeys[k] {
			return Batch{}, envelopeErr("unknown envelope field %q", truncate(k))
		}
		if seen[k] {
			return Batch{}, envelopeErr("key %q appears twice", k)
		}
		seen[k] = true
		switch k {
		case "topic":
			_, err = dec.DecodeString()
		case "publisher_id":
			env.publisherID, err = dec.DecodeUint64()
			hasPub = true
		case "sequence":
			env.sequence, err = dec.DecodeUint64()
			hasSeq = true
		case "published_at":
			env.publishedAt, err = dec.DecodeUint64()
			hasAt = true
		case "published_at_ns":
			_, err = dec.DecodeUint64()
		case "payload":
			env.payload, err = dec.DecodeBytes()
			has = true
		}
		if err != nil {
			return Batch{}, envelopeErr("%s: %v", k, err)
		}
	}
	if r.Len() > 0 {
		return Batch{}, envelopeErr("unexpected data after the envelope")
	}
	if err := requireEnvelope(hasPub, hasSeq, hasAt, has); err != nil {
		return Batch{}, envelopeErr("%v", err)
	}
	return decodePayload(env.payload)
}

// decodePayload decodes an envelope's payload: JSON (one RouterEvent or
// an array) or MessagePack (the same, with named keys). An envelope in an
// envelope is refused.
func decodePayload(p []byte) (Batch, error) {
	s := scanner{data: p}
	switch c := s.peek(); {
	case c == '{' || c == '[':
		if c == '{' && isEnvelopeJSON(p) {
			return Batch{}, envelopeErr("payload is itself an envelope")
		}
		b, err := DecodeRouterEventsBatchJSON(p)
		if err != nil {
			return Batch{}, envelopeErr("payload: %v", err)
		}
		return b, nil
	case len(p) > 0 && (isMsgpackMap(p) || p[0]&0xf0 == 0x90 || p[0] == 0xdc || p[0] == 0xdd):
		return decodeMsgpackPayload(p)
	}
	return Batch{}, envelopeErr("payload is neither JSON nor MessagePack")
}

// decodeMsgpackPayload decodes a MessagePack RouterEvent (or array of
// them) by way of its JSON spelling: MessagePack's integers, strings,
// maps and arrays map one to one onto the JSON the RouterEvent decoder
// reads, u64 hashes included (written as exact integers), so the event
// rules live in one place.
func decodeMsgpackPayload(p []byte) (Batch, error) {
	if err := checkMsgpack(p); err != nil {
		return Batch{}, envelopeErr("MessagePack payload: %v", err)
	}
	r := bytes.NewReader(p)
	dec := msgpack.NewDecoder(r)
	v, err := dec.DecodeInterfaceLoose()
	if err != nil {
		return Batch{}, envelopeErr("MessagePack payload: %v", err)
	}
	if r.Len() > 0 {
		return Batch{}, envelopeErr("MessagePack payload: unexpected data after the value")
	}
	if isEnvelopeValue(v) {
		return Batch{}, envelopeErr("payload is itself an envelope")
	}
	js, err := json.Marshal(jsonable(v))
	if err != nil {
		return Batch{}, envelopeErr("MessagePack payload: %v", err)
	}
	b, err := DecodeRouterEventsBatchJSON(js)
	if err != nil {
		return Batch{}, envelopeErr("payload: %v", err)
	}
	return b, nil
}

func isEnvelopeValue(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	_, a := m["publisher_id"]
	_, b := m["payload"]
	return a || b
}

// jsonable turns decoded MessagePack into values encoding/json writes as
// the same JSON: maps with other than string keys are refused by
// json.Marshal (an error, not a guess).
func jsonable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonable(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = jsonable(e)
		}
		return v
	}
	return v
}

// maxMsgpackDepth bounds the nesting of a MessagePack payload: a
// RouterEvent nests five deep, and the decoder recurses per level, so a
// hostile payload of a million one-byte arrays must be refused before it
// is decoded.
const maxMsgpackDepth = 32

// checkMsgpack walks a MessagePack value without recursion and checks
// that it is one complete value, nested at most maxMsgpackDepth deep.
func checkMsgpack(p []byte) error {
	pending := []uint64{1} // values still to read at each open level
	i := 0
	need := func(n uint64) error {
		if uint64(len(p)-i) < n {
			return errors.New("truncated MessagePack")
		}
		return nil
	}
	size := func(width int) uint64 { // a big-endian length after the type byte
		var n uint64
		for k := 1; k <= width; k++ {
			n = n<<8 | uint64(p[i+k])
		}
		return n
	}
	for len(pending) > 0 {
		top := len(pending) - 1
		if pending[top] == 0 {
			pending = pending[:top]
			continue
		}
		pending[top]--
		if err := need(1); err != nil {
			return err
		}
		c := p[i]
		var skip, kids uint64 // bytes to skip, values nested inside
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
			skip = 1
		case c&0xf0 == 0x80:
			skip, kids = 1, 2*uint64(c&0x0f)
		case c&0xf0 == 0x90:
			skip, kids = 1, uint64(c&0x0f)
		case c&0xe0 == 0xa0:
			skip = 1 + uint64(c&0x1f)
		case c == 0xc4 || c == 0xd9:
			if err := need(2); err != nil {
				return err
			}
			skip = 2 + size(1)
		case c == 0xc5 || c == 0xda:
			if err := need(3); err != nil {
				return err
			}
			skip = 3 + size(2)
		case c == 0xc6 || c == 0xdb:
			if err := need(5); err != nil {
				return err
			}
			skip = 5 + size(4)
		case c == 0xc7:
			if err := need(2); err != nil {
				return err
			}
			skip = 3 + size(1)
		case c == 0xc8:
			if err := need(3); err != nil {
				return err
			}
			skip = 4 + size(2)
		case c == 0xc9:
			if err := need(5); err != nil {
				return err
			}
			skip = 6 + size(4)
		case c == 0xcc || c == 0xd0:
			skip = 2
		case c == 0xcd || c == 0xd1:
			skip = 3
		case c == 0xca || c == 0xce || c == 0xd2:
			skip = 5
		case c == 0xcb || c == 0xcf || c == 0xd3:
			skip = 9
		case c >= 0xd4 && c <= 0xd8:
			skip = 2 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xde:
			if err := need(3); err != nil {
				return err
			}
			skip, kids = 3, size(2)
			if c == 0xde {
				kids *= 2
			}
		case c == 0xdd || c == 0xdf:
			if err := need(5); err != nil {
				return err
			}
			skip, kids = 5, size(4)
			if c == 0xdf {
				kids *= 2
			}
		default: // 0xc1 is never used
			return fmt.Errorf("invalid MessagePack type byte 0x%02x", c)
		}
		if err := need(skip); err != nil {
			return err
		}
		i += int(skip)
		if kids > 0 {
			if len(pending) > maxMsgpackDepth {
				return fmt.Errorf("MessagePack nested deeper than %d", maxMsgpackDepth)
			}
			pending = append(pending, kids)
		}
	}
	if i != len(p) {
		return errors.New("unexpected data after the MessagePack value")
	}
	return nil
}
