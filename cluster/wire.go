package cluster

import (
	"crypto/ed25519"
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
	// frameSigned wraps one of the above sent over memberlist's paths:
	// the sender's replica id and its boot key's signature (see
	// encodeSigned). Never nested, never on a stream (a stream's hello
	// already says who sends).
	frameSigned frameKind = 5
	// frameSessionDigest carries the digest of a replica's whole
	// sticky-session table (sessions.go).
	frameSessionDigest frameKind = 6
	// frameSessionRequest asks a replica for its session table.
	frameSessionRequest frameKind = 7
	// frameSessionReply is a replica's session table (messages.SessionTable).
	frameSessionReply frameKind = 8
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
	// Registry is the origin's worker-registry digest (registry.go), sent
	// only when HasRegistry (Config.RegistryDigest set): a digest frame
	// without it is what older replicas send and expect.
	Registry    uint64
	HasRegistry bool
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

// sessionDigestMsg is a replica's session-table digest.
type sessionDigestMsg struct {
	Origin string
	Digest Digest
}

// sessionReply is a replica's session table, answering Nonce.
type sessionReply struct {
	Origin  string
	Nonce   uint64
	Entries []*messages.SequenceEvent
}

// frame is one decoded user message; exactly the field matching kind is set.
type frame struct {
	kind           frameKind
	batch          []*messages.SequenceEvent
	digest         digestMsg
	request        stateRequest
	reply          stateReply
	sessionDigest  sessionDigestMsg
	sessionRequest stateRequest
	sessionReply   sessionReply
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
	b = binary.BigEndian.AppendUint64(b, d.Digest.Hash)
	if d.HasRegistry {
		b = binary.BigEndian.AppendUint64(b, d.Registry)
	}
	return b
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

func encodeSessionDigest(d sessionDigestMsg) []byte {
	b := []byte{byte(frameSessionDigest)}
	b = appendString(b, d.Origin)
	b = binary.AppendUvarint(b, uint64(max(d.Digest.Count, 0)))
	return binary.BigEndian.AppendUint64(b, d.Digest.Hash)
}

func encodeSessionRequest(r stateRequest) []byte {
	b := []byte{byte(frameSessionRequest)}
	b = appendString(b, r.Requester)
	return binary.AppendUvarint(b, r.Nonce)
}

func encodeSessionReply(r sessionReply) ([]byte, error) {
	b := []byte{byte(frameSessionReply)}
	b = appendString(b, r.Origin)
	b = binary.AppendUvarint(b, r.Nonce)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, &messages.SessionTable{Entries: r.Entries})
	if err != nil {
		return nil, fmt.Errorf("encode session table: %w", err)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// speaksFor reports whether f only speaks for member from: a batch's and a
// full state's events, a digest, a state request (its requester) must all
// be from's own. A member may free another replica's request (a client
// can finish a request through any replica), but only as an event of its
// own origin, never in another origin's name.
func (f *frame) speaksFor(from string) bool {
	switch f.kind {
	case frameBatch:
		return allOrigin(f.batch, from)
	case frameDigest:
		return f.digest.Origin == from
	case frameStateRequest:
		return f.request.Requester == from
	case frameStateReply:
		return f.reply.Origin == from && allOrigin(f.reply.Events, from)
	case frameSessionDigest:
		return f.sessionDigest.Origin == from
	case frameSessionRequest:
		return f.sessionRequest.Requester == from
	case frameSessionReply:
		// The table relays other replicas' writes (their versions name
		// them), but the sender vouches for every entry as its own state.
		return f.sessionReply.Origin == from && allOrigin(f.sessionReply.Entries, from)
	}
	return false
}

func allOrigin(evs []*messages.SequenceEvent, origin string) bool {
	for _, ev := range evs {
		if ev.GetOrigin() != origin {
			return false
		}
	}
	return true
}

// Signatures are over a domain string, so a signature made for one
// purpose cannot be replayed as another.
const (
	frameSigDomain = "kvrouter cluster frame v1\x00"
	helloSigDomain = "kvrouter cluster stream hello v1\x00"
)

func frameSigMessage(label, from string, inner []byte) []byte {
	b := make([]byte, 0, len(frameSigDomain)+len(label)+len(from)+len(inner)+4)
	b = append(b, frameSigDomain...)
	b = appendString(b, label)
	b = appendString(b, from)
	return append(b, inner...)
}

// encodeSigned wraps an encoded frame for memberlist's paths, whose
// messages carry no sender: [5][from][ed25519 signature][inner].
func encodeSigned(key ed25519.PrivateKey, label, from string, inner []byte) []byte {
	sig := ed25519.Sign(key, frameSigMessage(label, from, inner))
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(from)+len(sig)+len(inner))
	b = append(b, byte(frameSigned))
	b = appendString(b, from)
	b = append(b, sig...)
	return append(b, inner...)
}

// signedOverhead is what encodeSigned adds to a frame.
func signedOverhead(from string) int {
	return 1 + binary.MaxVarintLen64 + len(from) + ed25519.SignatureSize
}

// decodeSigned splits a frameSigned message; the signature is checked by
// the caller, who knows the sender's key.
func decodeSigned(buf []byte) (from string, sig, inner []byte, err error) {
	if len(buf) == 0 || frameKind(buf[0]) != frameSigned {
		return "", nil, nil, fmt.Errorf("%w: not a signed frame", ErrMalformed)
	}
	r := reader{buf: buf[1:]}
	from = r.string()
	if r.err == nil && len(r.buf) < ed25519.SignatureSize {
		r.err = fmt.Errorf("%w: short signature", ErrMalformed)
	}
	if r.err != nil {
		return "", nil, nil, r.err
	}
	sig, inner = r.buf[:ed25519.SignatureSize], r.buf[ed25519.SignatureSize:]
	if len(inner) == 0 || frameKind(inner[0]) == frameSigned {
		return "", nil, nil, fmt.Errorf("%w: empty or nested signed frame", ErrMalformed)
	}
	return from, sig, inner, nil
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
		if r.err == nil && len(r.buf) == 8 {
			f.digest.Registry, f.digest.HasRegistry = r.uint64(), true
		}
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
	case frameSessionDigest:
		f.sessionDigest.Origin = r.string()
		count := r.uvarint()
		f.sessionDigest.Digest.Hash = r.uint64()
		if r.err == nil && count > uint64(maxInt) {
			r.err = fmt.Errorf("%w: session digest count %d", ErrMalformed, count)
		}
		f.sessionDigest.Digest.Count = int(count)
		if err := r.done(); err != nil {
			return frame{}, fmt.Errorf("session digest: %w", err)
		}
	case frameSessionRequest:
		f.sessionRequest.Requester = r.string()
		f.sessionRequest.Nonce = r.uvarint()
		if err := r.done(); err != nil {
			return frame{}, fmt.Errorf("session request: %w", err)
		}
	case frameSessionReply:
		f.sessionReply.Origin = r.string()
		f.sessionReply.Nonce = r.uvarint()
		if r.err != nil {
			return frame{}, fmt.Errorf("session reply: %w", r.err)
		}
		var table messages.SessionTable
		if err := proto.Unmarshal(r.rest(), &table); err != nil {
			return frame{}, fmt.Errorf("session reply: %w: %w", ErrMalformed, err)
		}
		f.sessionReply.Entries = table.GetEntries()
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
