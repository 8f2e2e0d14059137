package zmqevents

import (
	"encoding/binary"
	"fmt"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/kv"
)

// EndSeq is the sequence number of the replay end marker (-1 as signed).
const EndSeq = ^uint64(0)

// Message is one decoded 3-frame publication.
type Message struct {
	Topic string
	Seq   uint64
	Batch Batch
}

// Batch is vLLM's EventBatch.
type Batch struct {
	Timestamp float64
	Events    []RawEvent
	// HasDPRank is false when data_parallel_rank was absent or nil.
	HasDPRank bool
	DPRank    uint32
}

// RawEvent is one engine event as it was on the wire, before the router
// hashes its tokens. Fields a kind does not have stay zero.
type RawEvent struct {
	// Kind is zero for an event of a type this decoder does not know;
	// UnknownType then holds its tag (at most 40 bytes).
	Kind        kv.EventKind
	UnknownType string
	// BlockHashes are the engine's block hashes as 64-bit keys (ints as
	// their two's-complement bits, bytes as their last 8 bytes).
	BlockHashes []uint64
	HasParent   bool
	ParentHash  uint64
	TokenIDs    []uint32
	// Bigram is set when token_ids came as (token, next token) pairs
	// (SGLang with EAGLE speculative decoding): TokenIDs holds each pair's
	// first token, the block's own tokens, and NextToken the second token
	// of the last pair, the one after the stored blocks.
	Bigram    bool
	NextToken uint32
	BlockSize int
	HasLoraID bool
	LoraID    int64
	Medium    string
	LoraName  string
	// ExtraKeys holds one entry per block: nil when the block has none,
	// else a fingerprint of the block's extra-keys tuple as encoded.
	ExtraKeys [][]uint64
	// ExtraLead and ExtraRest split each block's tuple (same indexes as
	// ExtraKeys) into its first element, when that is a string, and a
	// fingerprint of the elements after it (nil when there are none).
	// vLLM puts a LoRA request's adapter name first in every block's
	// tuple; the converter folds that into the LoRA salt instead.
	// Both are nil when no block's tuple starts with a string.
	ExtraLead []string
	ExtraRest [][]uint64
	HasGroup  bool
	GroupIdx  int64
}

// DecodeMessage decodes the frames of one publication:
// [topic, seq (8 bytes big-endian), msgpack EventBatch].
func DecodeMessage(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, malformed("%d frames, want 3 (topic, seq, payload)", len(frames))
	}
	seq, err := DecodeSeq(frames[1])
	if err != nil {
		return Message{}, err
	}
	b, err := DecodeBatch(frames[2])
	if err != nil {
		return Message{}, err
	}
	return Message{Topic: string(frames[0]), Seq: seq, Batch: b}, nil
}

// DecodeSeq decodes an 8-byte big-endian sequence frame.
func DecodeSeq(frame []byte) (uint64, error) {
	if len(frame) != 8 {
		return 0, malformed("sequence frame of %d bytes, want 8", len(frame))
	}
	return binary.BigEndian.Uint64(frame), nil
}

// DecodeBatch decodes a msgpack EventBatch, as an array [ts, events,
// dp_rank?] or a map {ts, events, data_parallel_rank}. Unknown fields and
// trailing elements are ignored; the whole payload must be consumed.
func DecodeBatch(payload []byte) (Batch, error) {
	r := &reader{buf: payload}
	k, err := r.peekKind()
	if err != nil {
		return Batch{}, err
	}
	var b Batch
	switch k {
	case kindArray:
		err = decodeBatchArray(r, &b)
	case kindMap:
		err = decodeBatchMap(r, &b)
	default:
		err = malformed("event batch is a %s, want an array or a map", kindName(k))
	}
	if err != nil {
		return Batch{}, err
	}
	if r.remaining() != 0 {
		return Batch{}, malformed("%d trailing bytes after the event batch", r.remaining())
	}
	return b, nil
}

func decodeBatchArray(r *reader, b *Batch) error {
	n, err := r.containerLen(kindArray)
	if err != nil {
		return err
	}
	if n < 2 {
		return malformed("event batch array of %d elements, want at least ts and events", n)
	}
	if b.Timestamp, err = r.float(); err != nil {
		return wrapField("ts", err)
	}
	if b.Events, err = decodeEvents(r); err != nil {
		return err
	}
	if n >= 3 {
		if err := decodeDPRank(r, b); err != nil {
			return err
		}
	}
	for range n - 3 {
		if err := r.skip(1); err != nil {
			return err
		}
	}
	return nil
}

func decodeBatchMap(r *reader, b *Batch) error {
	n, err := r.containerLen(kindMap)
	if err != nil {
		return err
	}
	var sawEvents bool
	for range n {
		key, err := r.rawBytes()
		if err != nil {
			return wrapField("batch key", err)
		}
		switch string(key) {
		case "ts":
			if b.Timestamp, err = r.float(); err != nil {
				return wrapField("ts", err)
			}
		case "events":
			if b.Events, err = decodeEvents(r); err != nil {
				return err
			}
			sawEvents = true
		case "data_parallel_rank":
			err = decodeDPRank(r, b)
		default:
			err = r.skip(1)
		}
		if err != nil {
			return err
		}
	}
	if !sawEvents {
		return malformed("event batch map has no events")
	}
	return nil
}

func decodeDPRank(r *reader, b *Batch) error {
	if r.tryNil() {
		return nil
	}
	v, neg, err := r.integer()
	if err != nil {
		return wrapField("data_parallel_rank", err)
	}
	if neg || v > 1<<20 {
		return malformed("data_parallel_rank %d out of range", int64(v))
	}
	b.HasDPRank, b.DPRank = true, uint32(v)
	return nil
}

func decodeEvents(r *reader) ([]RawEvent, error) {
	n, err := r.containerLen(kindArray)
	if err != nil {
		return nil, wrapField("events", err)
	}
	out := make([]RawEvent, n)
	for i := range out {
		if err := decodeEvent(r, &out[i]); err != nil {
			return nil, wrapField("event "+itoa(i), err)
		}
	}
	return out, nil
}

func decodeEvent(r *reader, ev *RawEvent) error {
	k, err := r.peekKind()
	if err != nil {
		return err
	}
	switch k {
	case kindArray:
		return decodeEventArray(r, ev)
	case kindMap:
		return decodeEventMap(r, ev)
	}
	return malformed("event is a %s, want a tagged array or a map", kindName(k))
}

// eventFields is the positional field order of each tagged-array event
// (after the tag), from vLLM's msgspec structs.
var eventFields = map[kv.EventKind][]string{
	kv.EventStored: {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
		"lora_name", "extra_keys", "group_idx"},
	kv.EventRemoved: {"block_hashes", "medium", "group_idx"},
	kv.EventCleared: {},
}

func parseTag(tag []byte) (kv.EventKind, error) {
	switch string(tag) {
	case "BlockStored":
		return kv.EventStored, nil
	case "BlockRemoved":
		return kv.EventRemoved, nil
	case "AllBlocksCleared":
		return kv.EventCleared, nil
	}
	return 0, fmtTag(tag)
}

func decodeEventArray(r *reader, ev *RawEvent) error {
	n, err := r.containerLen(kindArray)
	if err != nil {
		return err
	}
	if n == 0 {
		return malformed("empty event array has no type tag")
	}
	tag, err := r.rawBytes()
	if err != nil {
		return wrapField("type tag", err)
	}
	if ev.Kind, err = parseTag(tag); err != nil {
		// A type added after this decoder was written: skip its fields
		// so the rest of the batch still decodes.
		ev.UnknownType = clipTag(tag)
		for i := 1; i < n; i++ {
			if err := r.skip(1); err != nil {
				return err
			}
		}
		return nil
	}
	names := eventFields[ev.Kind]
	for i := 1; i < n; i++ {
		name := ""
		if i-1 < len(names) {
			name = names[i-1]
		}
		if err := decodeEventField(r, ev, name); err != nil {
			return err
		}
	}
	return checkRequired(ev, n-1)
}

func decodeEventMap(r *reader, ev *RawEvent) error {
	n, err := r.containerLen(kindMap)
	if err != nil {
		return err
	}
	start := r.pos
	// The tag may come after other fields, so find it first.
	for range n {
		key, err := r.rawBytes()
		if err != nil {
			return wrapField("event key", err)
		}
		if string(key) == "type" {
			tag, err := r.rawBytes()
			if err != nil {
				return wrapField("type", err)
			}
			if ev.Kind, err = parseTag(tag); err != nil {
				ev.Kind, ev.UnknownType = 0, clipTag(tag)
			}
			continue
		}
		if err := r.skip(1); err != nil {
			return err
		}
	}
	end := r.pos
	if ev.UnknownType != "" {
		return nil // every field was skipped above
	}
	if ev.Kind == 0 {
		return malformed("event map has no type")
	}
	r.pos = start
	for range n {
		key, _ := r.rawBytes() // the first pass read every key without error
		name := string(key)
		if name == "type" {
			_, _ = r.rawBytes() // and the tag
			continue
		}
		if err := decodeEventField(r, ev, name); err != nil {
			return err
		}
	}
	r.pos = end
	return checkRequiredMap(ev)
}

// checkRequired insists on the fields without which an event means
// nothing: the hashes of Stored and Removed, and Stored's parent, tokens
// and block size. Older vLLM sent exactly these; the rest may be missing.
func checkRequired(ev *RawEvent, fields int) error {
	switch ev.Kind {
	case kv.EventStored:
		if fields < 4 {
			return malformed("BlockStored has %d fields, want at least block_hashes, parent_block_hash, token_ids, block_size", fields)
		}
	case kv.EventRemoved:
		if fields < 1 {
			return malformed("BlockRemoved has no block_hashes")
		}
	}
	return nil
}

// checkRequiredMap is checkRequired for the map encoding, where fields
// are present by name rather than by count.
func checkRequiredMap(ev *RawEvent) error {
	switch ev.Kind {
	case kv.EventStored:
		if ev.BlockSize == 0 {
			return malformed("BlockStored has no block_size")
		}
		if ev.BlockHashes == nil {
			return malformed("BlockStored has no block_hashes")
		}
	case kv.EventRemoved:
		if ev.BlockHashes == nil {
			return malformed("BlockRemoved has no block_hashes")
		}
	}
	return nil
}

// decodeEventField decodes one named field into ev; an unknown name (a
// field added after this decoder was written) is skipped.
func decodeEventField(r *reader, ev *RawEvent, name string) error {
	var err error
	switch name {
	case "block_hashes":
		ev.BlockHashes, err = decodeHashes(r)
	case "parent_block_hash":
		if !r.tryNil() {
			ev.ParentHash, err = decodeHash(r)
			ev.HasParent = err == nil
		}
	case "token_ids":
		ev.TokenIDs, ev.Bigram, ev.NextToken, err = decodeTokens(r)
	case "block_size":
		var v uint64
		var neg bool
		v, neg, err = r.integer()
		if err == nil && (neg || v == 0 || v > 1<<20) {
			err = malformed("block_size %d out of range", int64(v))
		}
		ev.BlockSize = int(v)
	case "lora_id":
		if !r.tryNil() {
			var v uint64
			v, _, err = r.integer()
			ev.HasLoraID, ev.LoraID = err == nil, int64(v)
		}
	case "medium":
		ev.Medium, err = optionalString(r)
	case "lora_name":
		ev.LoraName, err = optionalString(r)
	case "extra_keys":
		err = decodeExtraKeys(r, ev)
	case "group_idx":
		if !r.tryNil() {
			var v uint64
			v, _, err = r.integer()
			ev.HasGroup, ev.GroupIdx = err == nil, int64(v)
		}
	default:
		err = r.skip(1)
	}
	if err != nil {
		return wrapField(name, err)
	}
	return nil
}

func optionalString(r *reader) (string, error) {
	if r.tryNil() {
		return "", nil
	}
	b, err := r.rawBytes()
	return string(b), err
}

func decodeHashes(r *reader) ([]uint64, error) {
	n, err := r.containerLen(kindArray)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i := range out {
		if out[i], err = decodeHash(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decodeHash reads an engine block hash: an unsigned or negative integer
// (its 64 bits) or bytes (the last 8, big-endian, as vLLM's int
// conversion; shorter ones are left-padded with zeros).
func decodeHash(r *reader) (uint64, error) {
	k, err := r.peekKind()
	if err != nil {
		return 0, err
	}
	switch k {
	case kindInt:
		v, _, err := r.integer()
		return v, err
	case kindBin, kindStr:
		b, err := r.rawBytes()
		if err != nil {
			return 0, err
		}
		if len(b) == 0 {
			return 0, malformed("empty block hash")
		}
		if len(b) > 8 {
			b = b[len(b)-8:]
		}
		var v uint64
		for _, x := range b {
			v = v<<8 | uint64(x)
		}
		return v, nil
	}
	return 0, malformed("block hash is a %s, want an integer or bytes", kindName(k))
}

// decodeTokens reads token_ids: a list of token ids, or SGLang's EAGLE
// form, a list of (token, next token) pairs that must chain (each pair's
// second token is the next pair's first). Pairs decode to their first
// tokens plus the last pair's second, returned apart as next.
func decodeTokens(r *reader) (ids []uint32, bigram bool, next uint32, err error) {
	n, err := r.containerLen(kindArray)
	if err != nil {
		return nil, false, 0, err
	}
	ids = make([]uint32, n)
	for i := range ids {
		k, err := r.peekKind()
		if err != nil {
			return nil, false, 0, err
		}
		isPair := k == kindArray
		if i == 0 {
			bigram = isPair
		} else if isPair != bigram {
			return nil, false, 0, fmt.Errorf("%w: element %d mixes token ids and (token, next token) pairs", ErrBadTokenIDs, i)
		}
		if !bigram {
			if ids[i], err = tokenID(r); err != nil {
				return nil, false, 0, err
			}
			continue
		}
		first, second, err := tokenPair(r)
		if err != nil {
			return nil, false, 0, fmt.Errorf("element %d: %w", i, err)
		}
		if i > 0 && first != next {
			return nil, false, 0, fmt.Errorf("%w: pair %d starts with %d, the previous pair ended with %d", ErrBadTokenIDs, i, first, next)
		}
		ids[i], next = first, second
	}
	return ids, bigram, next, nil
}

func tokenID(r *reader) (uint32, error) {
	v, neg, err := r.integer()
	if err != nil {
		return 0, err
	}
	if neg || v > 0xffffffff {
		return 0, malformed("token id %d out of range", int64(v))
	}
	return uint32(v), nil
}

func tokenPair(r *reader) (first, second uint32, err error) {
	n, err := r.containerLen(kindArray)
	if err != nil {
		return 0, 0, err
	}
	if n != 2 {
		return 0, 0, fmt.Errorf("%w: a (token, next token) pair of %d elements", ErrBadTokenIDs, n)
	}
	if first, err = tokenID(r); err != nil {
		return 0, 0, err
	}
	second, err = tokenID(r)
	return first, second, err
}

// decodeExtraKeys reads extra_keys: nil, or one entry per block, each nil
// or a tuple (LoRA name first, then MM identifiers and offsets, cache
// salt on block 0, prompt embedding hashes: vLLM's
// generate_block_hash_extra_keys). The router cannot interpret every
// kind, so each tuple becomes one fingerprint of its encoded bytes: equal
// keys give equal fingerprints, which is all the block hash needs. A
// tuple that starts with a string is also split into that string and a
// fingerprint of the rest, so the converter can take the LoRA name out.
func decodeExtraKeys(r *reader, ev *RawEvent) error {
	ev.ExtraKeys, ev.ExtraLead, ev.ExtraRest = nil, nil, nil
	if r.tryNil() {
		return nil
	}
	n, err := r.containerLen(kindArray)
	if err != nil {
		return err
	}
	keys := make([][]uint64, n)
	lead := make([]string, n)
	rest := make([][]uint64, n)
	anyLead := false
	for i := range keys {
		if r.tryNil() {
			continue
		}
		start := r.pos
		k, err := r.peekKind()
		if err != nil {
			return err
		}
		if k == kindArray {
			if lead[i], rest[i], err = splitLead(r); err != nil {
				return err
			}
			anyLead = anyLead || lead[i] != ""
		} else if err := r.skip(1); err != nil {
			return err
		}
		raw := r.buf[start:r.pos]
		if len(raw) == 1 && (raw[0] == 0x90 || raw[0] == 0x80) {
			continue // an empty tuple is no key
		}
		keys[i] = []uint64{xxh3.Hash(raw)}
	}
	ev.ExtraKeys = keys
	if anyLead {
		ev.ExtraLead, ev.ExtraRest = lead, rest
	}
	return nil
}

// splitLead reads one extra-keys tuple and returns its first element when
// it is a string, with a fingerprint of the elements after it encoded as
// a tuple of their own (nil when there are none). The fingerprint equals
// the one a tuple without the lead gets, so a block keyed by a LoRA name
// and a cache salt hashes like the same block keyed by the salt alone
// under that LoRA's seed.
func splitLead(r *reader) (string, []uint64, error) {
	n, err := r.containerLen(kindArray)
	if err != nil {
		return "", nil, err
	}
	if n == 0 {
		return "", nil, nil
	}
	if k, err := r.peekKind(); err != nil {
		return "", nil, err
	} else if k != kindStr {
		for range n {
			if err := r.skip(1); err != nil {
				return "", nil, err
			}
		}
		return "", nil, nil
	}
	b, err := r.rawBytes()
	if err != nil {
		return "", nil, err
	}
	if len(b) == 0 {
		// An empty string is a key like any other, but no LoRA name.
		for range n - 1 {
			if err := r.skip(1); err != nil {
				return "", nil, err
			}
		}
		return "", nil, nil
	}
	start := r.pos
	for range n - 1 {
		if err := r.skip(1); err != nil {
			return "", nil, err
		}
	}
	if n == 1 {
		return string(b), nil, nil
	}
	tuple := appendArrayHeader(nil, n-1)
	tuple = append(tuple, r.buf[start:r.pos]...)
	return string(b), []uint64{xxh3.Hash(tuple)}, nil
}

// appendArrayHeader appends msgpack's header of an n-element array.
func appendArrayHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n < 1<<16:
		return append(dst, 0xdc, byte(n>>8), byte(n))
	}
	return append(dst, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}
