package zmqevents

import (
	"errors"
	"fmt"
)

// Errors callers can match with errors.Is. Every decoding failure wraps
// ErrMalformed; the more specific malformations wrap it too. Events that
// follow the wire format but cannot be indexed (an unknown type or medium,
// a short last page) have errors of their own that do not.
var (
	// ErrMalformed marks a message, batch or event that does not follow
	// the wire format.
	ErrMalformed = fmt.Errorf("malformed kv event message")
	// ErrBlockSizeMismatch marks a BlockStored whose block_size differs
	// from the router's: its tokens would hash to different blocks.
	ErrBlockSizeMismatch = fmt.Errorf("%w: block size differs from the router's", ErrMalformed)
	// ErrTokensShort marks a BlockStored whose token_ids do not cover
	// len(block_hashes)*block_size tokens.
	ErrTokensShort = fmt.Errorf("%w: token_ids do not cover the stored blocks", ErrMalformed)
	// ErrBadTokenIDs marks token_ids that are neither a list of token ids
	// nor a list of chained (token, next token) pairs.
	ErrBadTokenIDs = fmt.Errorf("%w: bad token_ids", ErrMalformed)
	// ErrUnknownEventType marks an event whose tag is not one of
	// BlockStored, BlockRemoved, AllBlocksCleared (a newer engine's type):
	// the event is skipped, the rest of its batch is applied.
	ErrUnknownEventType = errors.New("unknown kv event type")
	// ErrUnknownMedium marks a BlockStored or BlockRemoved whose medium
	// names no storage tier the router knows: scoring it as any tier
	// would be a guess, so it is skipped.
	ErrUnknownMedium = errors.New("unknown kv event medium")
	// ErrShortPage marks SGLang's short last page: a one-page BlockStored
	// with fewer tokens than a block. The engine cannot reuse it as a
	// block, so it is skipped; it is not a malformation.
	ErrShortPage = errors.New("short last page")
	// ErrClosed is returned by a closed Manager.
	ErrClosed = errors.New("zmqevents: closed")
)

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Reason says why an event was skipped (or, for ReasonLoraIDWithoutName,
// why it was indexed where no query finds it). It is the "reason" label of
// the kvrouter_zmq_events_dropped_total counter.
type Reason uint8

const (
	// ReasonMalformed: frames, batch or event not in the wire format.
	ReasonMalformed Reason = iota
	// ReasonUnknownEventType: an event type this router does not know.
	ReasonUnknownEventType
	// ReasonBlockSizeMismatch: block_size differs from --block-size.
	ReasonBlockSizeMismatch
	// ReasonBadTokenIDs: token_ids too short for the blocks, or pairs
	// that do not chain.
	ReasonBadTokenIDs
	// ReasonUnknownMedium: a medium no tier is known for.
	ReasonUnknownMedium
	// ReasonShortLastPage: SGLang's short last page, skipped by design
	// (not an error).
	ReasonShortLastPage
	// ReasonLoraIDWithoutName: a LoRA block with lora_id but no adapter
	// name anywhere in the event. It is indexed under a namespace of its
	// own that no query matches (never as base-model blocks), and counted
	// so the operator knows why the adapter's prompts miss.
	ReasonLoraIDWithoutName
	// ReasonLoraNameNotInExtraKeys: a LoRA block whose extra_keys do not
	// start with the adapter's name, as vLLM's always have. It is indexed
	// with those keys, so it matches no plain adapter query; the count
	// makes an engine format change visible.
	ReasonLoraNameNotInExtraKeys
	// NumReasons is the number of reasons.
	NumReasons
)

var reasonNames = [NumReasons]string{
	"malformed", "unknown_event_type", "block_size_mismatch", "bad_token_ids",
	"unknown_medium", "short_last_page", "lora_id_without_name", "lora_name_not_in_extra_keys",
}

func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Dropped reports whether events of this reason are left out of the index
// (the LoRA reasons are indexed, where no plain query matches them).
func (r Reason) Dropped() bool {
	return r != ReasonLoraIDWithoutName && r != ReasonLoraNameNotInExtraKeys
}

// IsError reports whether the reason is a fault of the input (counted in
// Stats.Malformed as well), as opposed to a form skipped or kept by design.
func (r Reason) IsError() bool { return r.Dropped() && r != ReasonShortLastPage }

// ReasonOf classifies an error of DecodeBatch or Converter.Convert.
func ReasonOf(err error) Reason {
	switch {
	case errors.Is(err, ErrUnknownEventType):
		return ReasonUnknownEventType
	case errors.Is(err, ErrBlockSizeMismatch):
		return ReasonBlockSizeMismatch
	case errors.Is(err, ErrTokensShort), errors.Is(err, ErrBadTokenIDs):
		return ReasonBadTokenIDs
	case errors.Is(err, ErrUnknownMedium):
		return ReasonUnknownMedium
	case errors.Is(err, ErrShortPage):
		return ReasonShortLastPage
	}
	return ReasonMalformed
}
