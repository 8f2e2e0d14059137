package zmqevents

import (
	"errors"
	"fmt"
)

// Errors callers can match with errors.Is. Every decoding failure wraps
// ErrMalformed; the more specific ones wrap it too.
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
	// ErrUnknownEventType marks an event whose tag is not one of
	// BlockStored, BlockRemoved, AllBlocksCleared.
	ErrUnknownEventType = fmt.Errorf("%w: unknown event type", ErrMalformed)
	// ErrClosed is returned by a closed Manager.
	ErrClosed = errors.New("zmqevents: closed")
)

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}
