package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/messages"
)

// ErrMalformed is wrapped by every error decoding a peer's message.
var ErrMalformed = errors.New("cluster: malformed message")

// frameKind is the first byte of every user message a Node sends.
type frameKind byte

const (
	// frameBatch carries a messages.SequenceEventBatch of one origin.
	frameBatch frameKind = 1
	// frameDigest carries an origin's anti-entropy digest at a Seq.
	frameDigest frameKind = 2
	// frameStateRequest asks an origin for its full state.
	frameStateRequest frameKind = 3
	// frameStateReply is an origin's full state, as of a Seq.
	frameStateReply frameKind = 4
)

// maxNameLen bounds decoded replica ids; memberlist node names are short and
// a bound keeps a corrupt length from allocating much.
const maxNameLen = 512

// digestMsg is an origin's summary of its own requests after every event up
// to and including Seq.
type digestMsg struct {
	Origin string
	Seq    uint64
	Digest Digest
}

// stateRequest asks the receiving origin to send its full state back to
// Requester; Nonce is echoed so a late reply to an abandoned request is
// recognised.
type stateRequest struct {
	Requester string
	Nonce     uint64
}

// stateReply is an origin's full state (OwnedRequests form): it reflects at
// least every event up to and including Seq, and possibly later ones.
type stateReply struct {
	Origin string
	Nonce  uint64
	Seq    uint64
	Events []*messages.SequenceEvent
}

// frame is one decoded user message; exactly the field matching kind is set.
type frame struct {
	kind    frameKind
	batch   []*messages.SequenceEvent
	digest  digestMsg
	request stateRequest
	reply   stateReply
}

func encodeBatch(evs []*messages.SequenceEvent) ([]byte, error) {
	b, err := proto.MarshalOptions{}.MarshalAppend([]byte{byte(frameBatch)}, &messages.SequenceEventBatch{Events: evs})
	if err != nil {
		return nil, fmt.Errorf("encode batch: %w", err)
	}
	return b, nil
}

func encodeDigest(d digestMsg) []byte {
	b := []byte{byte(frameDigest)}
	b = appendString(b, d.Origin)
	b = binary.AppendUvarint(b, d.Seq)
	b = binary.AppendUvarint(b, uint64(max(d.Digest.Count, 0)))
	return binary.BigEndian.AppendUint64(b, d.Digest.Hash)
}

func encodeStateRequest(r stateRequest) []byte {
	b := []byte{byte(frameStateRequest)}
	b = appendString(b, r.Requester)
	return binary.AppendUvarint(b, r.Nonce)
}

func encodeStateReply(r stateReply) ([]byte, error) {
	b := []byte{byte(frameStateReply)}
	b = appendString(b, r.Origin)
	b = binary.AppendUvarint(b, r.Nonce)
	b = binary.AppendUvarint(b, r.Seq)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, &messages.SequenceEventBatch{Events: r.Events})
	if err != nil {
		return nil, fmt.Errorf("encode state reply: %w", err)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeFrame parses a user message. It never panics on bad input.
func decodeFrame(buf []byte) (frame, error) {
	if len(buf) == 0 {
		return frame{}, fmt.Errorf("%w: empty", ErrMalformed)
	}
	f := frame{kind: frameKind(buf[0])}
	r := reader{buf: buf[1:]}
	switch f.kind {
	case frameBatch:
		evs, err := decodeEvents(r.rest())
		if err != nil {
			return frame{}, err
		}
		f.batch = evs
	case frameDigest:
		f.digest.Origin = r.string()
		f.digest.Seq = r.uvarint()
		count := r.uvarint()
		f.digest.Digest.Hash = r.uint64()
		if r.err == nil && count > uint64(maxInt) {
			r.err = fmt.Errorf("%w: digest count %d", ErrMalformed, count)
		}
		f.digest.Digest.Count = int(count)
		if err := r.done(); err != nil {
			return frame{}, fmt.Errorf("digest: %w", err)
		}
	case frameStateRequest:
		f.request.Requester = r.string()
		f.request.Nonce = r.uvarint()
		if err := r.done(); err != nil {
			return frame{}, fmt.Errorf("state request: %w", err)
		}
	case frameStateReply:
		f.reply.Origin = r.string()
		f.reply.Nonce = r.uvarint()
		f.reply.Seq = r.uvarint()
		if r.err != nil {
			return frame{}, fmt.Errorf("state reply: %w", r.err)
		}
		evs, err := decodeEvents(r.rest())
		if err != nil {
			return frame{}, fmt.Errorf("state reply: %w", err)
		}
		f.reply.Events = evs
	default:
		return frame{}, fmt.Errorf("%w: unknown kind %d", ErrMalformed, buf[0])
	}
	return f, nil
}

const maxInt = int(^uint(0) >> 1)

func decodeEvents(b []byte) ([]*messages.SequenceEvent, error) {
	var batch messages.SequenceEventBatch
	if err := proto.Unmarshal(b, &batch); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return batch.GetEvents(), nil
}

// reader decodes the hand-rolled fields; the first error sticks and later
// reads return zero values.
type reader struct {
	buf []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad varint", ErrMalformed)
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

func (r *reader) uint64() uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.buf) < 8 {
		r.err = fmt.Errorf("%w: short uint64", ErrMalformed)
		return 0
	}
	v := binary.BigEndian.Uint64(r.buf)
	r.buf = r.buf[8:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > maxNameLen || n > uint64(len(r.buf)) {
		r.err = fmt.Errorf("%w: string length %d", ErrMalformed, n)
		return ""
	}
	s := string(r.buf[:n])
	r.buf = r.buf[n:]
	return s
}

func (r *reader) rest() []byte {
	b := r.buf
	r.buf = nil
	return b
}

// done reports the sticky error, or trailing bytes as an error.
func (r *reader) done() error {
	if r.err != nil {
		return r.err
	}
	if len(r.buf) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(r.buf))
	}
	return nil
}
