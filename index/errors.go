package index

import "errors"

// Sentinel errors returned (wrapped) by Apply; match them with errors.Is.
var (
	// ErrInvalidEvent: the event's shape is wrong (unknown kind or tier, a
	// Stored event without blocks). Nothing was applied.
	ErrInvalidEvent = errors.New("invalid event")
	// ErrParentNotFound: a Stored event names a parent the rank does not
	// hold in this tree. The whole event was skipped, as in Dynamo.
	ErrParentNotFound = errors.New("parent block not found")
	// ErrBlockNotFound: a Removed event names a block the rank does not
	// hold. The rest of the batch was still applied.
	ErrBlockNotFound = errors.New("block not found")
	// ErrInvalidBlockSequence: a Stored chain refers to itself (an engine
	// hash repeated in the chain or equal to the parent's, or naming an
	// ancestor of the block being stored). Blocks before the offending one
	// may have been applied; the tree stays consistent.
	ErrInvalidBlockSequence = errors.New("invalid block sequence")
)

// ErrorReason maps an Apply error to a short, stable label for metrics
// ("" for nil, "error" for anything this package does not return).
func ErrorReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrInvalidEvent):
		return "invalid_event"
	case errors.Is(err, ErrParentNotFound):
		return "parent_not_found"
	case errors.Is(err, ErrBlockNotFound):
		return "block_not_found"
	case errors.Is(err, ErrInvalidBlockSequence):
		return "invalid_block_sequence"
	}
	return "error"
}
