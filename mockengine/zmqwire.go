package mockengine

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// ZMQWire selects engine forms of the KV event wire the publisher
// reproduces, so a router can be tested against each over real sockets.
// The zero value is vLLM's plain form.
type ZMQWire struct {
	// LoRAName publishes every Stored event in vLLM's LoRA block-pool
	// shape: lora_id LoRAID, lora_name, and the name first in each
	// block's extra_keys (v1/core/kv_cache_utils.py).
	LoRAName string
	LoRAID   int64
	// LoRAIDOnly keeps lora_id and drops lora_name and extra_keys, as
	// vLLM did before lora_name existed: nothing names the adapter.
	LoRAIDOnly bool
	// UnknownEventType puts an event of this type (one a newer engine
	// might add) in every batch, before the real event.
	UnknownEventType string
	// EAGLEPairs writes token_ids as SGLang's EAGLE (token, next token)
	// pairs.
	EAGLEPairs bool
	// SGLangPages writes SGLang's per-page form (radix_cache
	// _record_store_event): one BlockStored per block, each parented on
	// the one before, with block_size the page's length.
	SGLangPages bool
	// ShortPageTokens ends every SGLang-form store with a short last page
	// of this many tokens (1 .. block size - 1), as a radix node whose
	// length is not a multiple of the page size does.
	ShortPageTokens int
	// BlockSize is the block_size written; other than the engine's block
	// size it reproduces an engine configured with another block size.
	// 0 writes the real one.
	BlockSize int
}

// ParseZMQWire parses a comma-separated list of wire modes:
//
//	lora=NAME[:ID]   vLLM LoRA block-pool shape (ID default 1)
//	lora-id=ID       lora_id without any adapter name
//	unknown=TYPE     an event of an unknown type in every batch
//	eagle            (token, next token) pairs
//	sglang-pages     one BlockStored per page
//	short-page=N     SGLang pages ending with a page of N tokens
//	block-size=N     write block_size N (a block size mismatch)
//
// The empty string is the plain form.
func ParseZMQWire(s string) (ZMQWire, error) {
	var w ZMQWire
	if strings.TrimSpace(s) == "" {
		return w, nil
	}
	for _, part := range strings.Split(s, ",") {
		key, val, hasVal := strings.Cut(strings.TrimSpace(part), "=")
		num := func() (int64, error) {
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("%w: zmq wire mode %q: want a non-negative integer", ErrInvalidConfig, part)
			}
			return n, nil
		}
		var err error
		switch {
		case key == "lora" && hasVal && val != "":
			name, id, withID := strings.Cut(val, ":")
			w.LoRAName, w.LoRAID = name, 1
			if withID {
				val = id
				w.LoRAID, err = num()
			}
		case key == "lora-id" && hasVal:
			w.LoRAIDOnly = true
			w.LoRAID, err = num()
		case key == "unknown" && hasVal && val != "":
			w.UnknownEventType = val
		case key == "eagle" && !hasVal:
			w.EAGLEPairs = true
		case key == "sglang-pages" && !hasVal:
			w.SGLangPages = true
		case key == "short-page" && hasVal:
			var n int64
			n, err = num()
			w.SGLangPages, w.ShortPageTokens = true, int(n)
		case key == "block-size" && hasVal:
			var n int64
			n, err = num()
			w.BlockSize = int(n)
		default:
			return ZMQWire{}, fmt.Errorf("%w: unknown zmq wire mode %q", ErrInvalidConfig, part)
		}
		if err != nil {
			return ZMQWire{}, err
		}
	}
	return w, nil
}

// validate checks the modes against the engine's block size.
func (w ZMQWire) validate(blockSize int) error {
	switch {
	case w.ShortPageTokens < 0 || w.ShortPageTokens >= blockSize:
		return fmt.Errorf("%w: short page of %d tokens with blocks of %d", ErrInvalidConfig, w.ShortPageTokens, blockSize)
	case w.LoRAName != "" && w.LoRAIDOnly:
		return fmt.Errorf("%w: lora and lora-id are exclusive", ErrInvalidConfig)
	case w.BlockSize < 0:
		return fmt.Errorf("%w: wire block size %d", ErrInvalidConfig, w.BlockSize)
	}
	return nil
}

// shortPageSalt derives a short page's engine hash from its parent's, so
// it never collides with a real block's.
const shortPageSalt = 0x5bd1e9955bd1e995

// stored turns one Stored event (its blocks' tokens known) into the raw
// events of the selected form.
func (w ZMQWire) stored(raw zmqevents.RawEvent) []zmqevents.RawEvent {
	if len(raw.BlockHashes) == 0 || len(raw.TokenIDs) == 0 {
		return []zmqevents.RawEvent{raw} // nothing to reshape
	}
	if w.LoRAName != "" {
		raw.HasLoraID, raw.LoraID, raw.LoraName = true, w.LoRAID, w.LoRAName
		raw.ExtraLead = make([]string, len(raw.BlockHashes))
		for i := range raw.ExtraLead {
			raw.ExtraLead[i] = w.LoRAName
		}
	}
	if w.LoRAIDOnly {
		raw.HasLoraID, raw.LoraID = true, w.LoRAID
	}
	var tail []uint32 // the short page's tokens, which follow the blocks
	if w.ShortPageTokens > 0 {
		last := raw.TokenIDs[len(raw.TokenIDs)-1]
		for i := range w.ShortPageTokens {
			tail = append(tail, last+1+uint32(i))
		}
	}
	if w.EAGLEPairs {
		raw.Bigram = true
		raw.NextToken = raw.TokenIDs[len(raw.TokenIDs)-1] + 1
	}
	if !w.SGLangPages {
		if w.BlockSize > 0 {
			raw.BlockSize = w.BlockSize
		}
		return []zmqevents.RawEvent{raw}
	}
	out := make([]zmqevents.RawEvent, 0, len(raw.BlockHashes)+1)
	bs := raw.BlockSize
	for i, h := range raw.BlockHashes {
		page := raw
		page.BlockHashes = []uint64{h}
		page.TokenIDs = raw.TokenIDs[i*bs : (i+1)*bs]
		if i > 0 {
			page.HasParent, page.ParentHash = true, raw.BlockHashes[i-1]
		}
		if page.ExtraLead != nil {
			page.ExtraLead = raw.ExtraLead[i : i+1]
		}
		if page.Bigram {
			page.NextToken = raw.NextToken
			if i+1 < len(raw.BlockHashes) {
				page.NextToken = raw.TokenIDs[(i+1)*bs]
			} else if len(tail) > 0 {
				page.NextToken = tail[0]
			}
		}
		if w.BlockSize > 0 {
			page.BlockSize = w.BlockSize
		}
		out = append(out, page)
	}
	if len(tail) > 0 {
		parent := raw.BlockHashes[len(raw.BlockHashes)-1]
		short := zmqevents.RawEvent{Kind: kv.EventStored, BlockHashes: []uint64{parent ^ shortPageSalt},
			HasParent: true, ParentHash: parent, TokenIDs: tail, BlockSize: len(tail), Medium: raw.Medium,
			HasLoraID: raw.HasLoraID, LoraID: raw.LoraID, LoraName: raw.LoraName, Bigram: raw.Bigram,
			NextToken: tail[len(tail)-1] + 1}
		if raw.ExtraLead != nil {
			short.ExtraLead = []string{w.LoRAName}
		}
		out = append(out, short)
	}
	return out
}
