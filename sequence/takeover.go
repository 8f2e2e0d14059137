package sequence

import (
	"errors"
	"fmt"
	"time"
)

// A request a client retried through another router replica (its first
// replica died before answering) arrives again under the same id with a
// new origin: the replica that decided it again. These rules keep it
// counted once per rank.

// TakeOver adds r like AddRequest, except that an id already active under
// another origin is replaced by r (it was routed again by r.Origin).
// self is the origin of this replica's own decisions: those are never
// replaced by a peer's add (this replica's scheduler holds and frees
// them). took reports a replacement; an id active under r.Origin itself
// is ErrDuplicateRequest, as for AddRequest.
func (s *ActiveSequences) TakeOver(r Request, now time.Time, self string) (took bool, err error) {
	st, ok := s.requests[r.ID]
	if !ok || st.origin == r.Origin || st.origin == self {
		return false, s.AddRequest(r, now)
	}
	if err := validateRequest(r); err != nil {
		return false, err
	}
	s.remove(r.ID, st)
	if err := s.AddRequest(r, now); err != nil {
		return true, fmt.Errorf("take over %q: %w", r.ID, err)
	}
	return true, nil
}

// ErrOtherOrigin: a release named an origin that does not hold the id.
var ErrOtherOrigin = errors.New("request active under another origin")

// FreeFrom frees id only if origin holds it: a replica that decided a
// retried request again releases the departed replica's record of it
// without touching its own (which may already have replaced it).
func (s *ActiveSequences) FreeFrom(id, origin string) error {
	st, ok := s.requests[id]
	if !ok {
		return fmt.Errorf("release %q: %w", id, ErrUnknownRequest)
	}
	if st.origin != origin {
		return fmt.Errorf("release %q of %q: %w", id, origin, ErrOtherOrigin)
	}
	s.remove(id, st)
	return nil
}
