package zmqevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvrouter/kvrouter/kv"
)

// Encoding selects how EncodeBatch lays out a batch.
type Encoding uint8

const (
	// EncodingArray is vLLM up to v0.23 and msgspec array_like: the batch
	// and every event are positional arrays, events tagged by class name.
	EncodingArray Encoding = iota
	// EncodingMap is vLLM after #42892 with the batch also a map (as the
	// newest kv_events.py declares it): every struct is a map by field
	// name, events carrying "type".
	EncodingMap
)

// ParseEncoding reads "array" or "map".
func ParseEncoding(s string) (Encoding, error) {
	switch s {
	case "array":
		return EncodingArray, nil
	case "map":
		return EncodingMap, nil
	}
	return 0, fmt.Errorf("unknown kv event encoding %q (want array or map)", s)
}

func (e Encoding) String() string {
	if e == EncodingMap {
		return "map"
	}
	return "array"
}

// ErrUnencodable is returned for a RawEvent the encoder cannot write:
// decoded extra keys are fingerprints, not the original tuples.
var ErrUnencodable = errors.New("event cannot be encoded")

// EncodeSeq returns the 8-byte big-endian sequence frame.
func EncodeSeq(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// EncodeMessage returns the three frames of one publication.
func EncodeMessage(topic string, seq uint64, b *Batch, enc Encoding) ([][]byte, error) {
	payload, err := EncodeBatch(b, enc)
	if err != nil {
		return nil, err
	}
	return [][]byte{[]byte(topic), EncodeSeq(seq), payload}, nil
}

// EncodeBatch encodes a batch the way vLLM's msgspec encoder does:
// smallest integer forms, float64 timestamps, trailing defaults omitted.
// Events write lora_id, medium and lora_name always (vLLM requires them)
// and group_idx only when set.
func EncodeBatch(b *Batch, enc Encoding) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	w := &writer{e: e, enc: enc}
	if enc == EncodingMap {
		n := 2
		if b.HasDPRank {
			n++
		}
		w.mapLen(n)
		w.str("ts")
		w.float(b.Timestamp)
		w.str("events")
	} else {
		n := 2
		if b.HasDPRank {
			n++
		}
		w.arrayLen(n)
		w.float(b.Timestamp)
	}
	w.arrayLen(len(b.Events))
	for i := range b.Events {
		if err := w.event(&b.Events[i]); err != nil {
			return nil, err
		}
	}
	if b.HasDPRank {
		if enc == EncodingMap {
			w.str("data_parallel_rank")
		}
		w.uint(uint64(b.DPRank))
	}
	if w.err != nil {
		return nil, fmt.Errorf("encode event batch: %w", w.err)
	}
	return buf.Bytes(), nil
}

// writer keeps the first encoder error so the layout code reads straight.
type writer struct {
	e   *msgpack.Encoder
	enc Encoding
	err error
}

func (w *writer) keep(err error) {
	if w.err == nil {
		w.err = err
	}
}
func (w *writer) arrayLen(n int)  { w.keep(w.e.EncodeArrayLen(n)) }
func (w *writer) mapLen(n int)    { w.keep(w.e.EncodeMapLen(n)) }
func (w *writer) str(s string)    { w.keep(w.e.EncodeString(s)) }
func (w *writer) float(f float64) { w.keep(w.e.EncodeFloat64(f)) }
func (w *writer) uint(v uint64)   { w.keep(w.e.EncodeUint(v)) }
func (w *writer) int(v int64)     { w.keep(w.e.EncodeInt(v)) }
func (w *writer) nilValue()       { w.keep(w.e.EncodeNil()) }
func (w *writer) key(name string) {
	if w.enc == EncodingMap {
		w.str(name)
	}
}

func (w *writer) optString(s string) {
	if s == "" {
		w.nilValue()
		return
	}
	w.str(s)
}

func (w *writer) hashes(hs []uint64) {
	w.arrayLen(len(hs))
	for _, h := range hs {
		w.uint(h)
	}
}

// event writes one event. ExtraKeys (decoded fingerprints) cannot be
// encoded; ExtraLead without ExtraKeys writes vLLM's LoRA block-pool
// extra_keys, one (name,) tuple per block ("" writes nil). Bigram writes
// token_ids as SGLang's EAGLE (token, next token) pairs, NextToken ending
// the last one. A zero Kind with UnknownType writes an event of that type
// with no fields, as a newer engine's would look to this decoder.
func (w *writer) event(ev *RawEvent) error {
	if ev.ExtraKeys != nil {
		return fmt.Errorf("%w: extra keys are decoded fingerprints", ErrUnencodable)
	}
	var tag string
	var fields int
	switch ev.Kind {
	case kv.EventStored:
		tag, fields = "BlockStored", 7
	case kv.EventRemoved:
		tag, fields = "BlockRemoved", 2
	case kv.EventCleared:
		tag, fields = "AllBlocksCleared", 0
	case 0:
		if ev.UnknownType == "" {
			return fmt.Errorf("%w: kind 0 without a type", ErrUnencodable)
		}
		tag = ev.UnknownType
	default:
		return fmt.Errorf("%w: kind %d", ErrUnencodable, ev.Kind)
	}
	extra := ev.Kind == kv.EventStored && ev.ExtraLead != nil
	if extra {
		fields++ // extra_keys, positionally right after lora_name
	}
	if ev.HasGroup {
		switch ev.Kind {
		case kv.EventStored:
			fields++
			if !extra {
				fields++ // a nil extra_keys precedes group_idx positionally
			}
		case kv.EventRemoved:
			fields++
		}
	}
	if w.enc == EncodingMap {
		if ev.Kind == kv.EventStored && ev.HasGroup && !extra {
			fields-- // by name, the nil extra_keys is simply omitted
		}
		w.mapLen(fields + 1)
		w.str("type")
	} else {
		w.arrayLen(fields + 1)
	}
	w.str(tag)
	switch ev.Kind {
	case kv.EventStored:
		w.key("block_hashes")
		w.hashes(ev.BlockHashes)
		w.key("parent_block_hash")
		if ev.HasParent {
			w.uint(ev.ParentHash)
		} else {
			w.nilValue()
		}
		w.key("token_ids")
		w.tokens(ev)
		w.key("block_size")
		w.uint(uint64(ev.BlockSize))
		w.key("lora_id")
		if ev.HasLoraID {
			w.int(ev.LoraID)
		} else {
			w.nilValue()
		}
		w.key("medium")
		w.optString(ev.Medium)
		w.key("lora_name")
		w.optString(ev.LoraName)
		if extra {
			w.key("extra_keys")
			w.arrayLen(len(ev.ExtraLead))
			for _, lead := range ev.ExtraLead {
				if lead == "" {
					w.nilValue()
					continue
				}
				w.arrayLen(1)
				w.str(lead)
			}
		}
		if ev.HasGroup {
			if w.enc == EncodingArray && !extra {
				w.nilValue() // extra_keys
			}
			w.key("group_idx")
			w.int(ev.GroupIdx)
		}
	case kv.EventRemoved:
		w.key("block_hashes")
		w.hashes(ev.BlockHashes)
		w.key("medium")
		w.optString(ev.Medium)
		if ev.HasGroup {
			w.key("group_idx")
			w.int(ev.GroupIdx)
		}
	}
	return nil
}

func (w *writer) tokens(ev *RawEvent) {
	w.arrayLen(len(ev.TokenIDs))
	for i, t := range ev.TokenIDs {
		if !ev.Bigram {
			w.uint(uint64(t))
			continue
		}
		next := ev.NextToken
		if i+1 < len(ev.TokenIDs) {
			next = ev.TokenIDs[i+1]
		}
		w.arrayLen(2)
		w.uint(uint64(t))
		w.uint(uint64(next))
	}
}
