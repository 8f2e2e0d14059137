package cluster

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/messages"
)

// ErrInvalidEvent is returned (wrapped) for an event with no data or no
// valid request id.
var ErrInvalidEvent = errors.New("cluster: invalid sequence event")

// eventRequestID returns the request (or session) id an event is about.
func eventRequestID(ev *messages.SequenceEvent) (string, error) {
	var id string
	switch {
	case ev == nil:
		return "", fmt.Errorf("%w: nil", ErrInvalidEvent)
	case ev.GetAdd() != nil:
		id = ev.GetAdd().GetRequestId()
	case ev.GetPrefillCompleted() != nil:
		id = ev.GetPrefillCompleted().GetRequestId()
	case ev.GetFree() != nil:
		id = ev.GetFree().GetRequestId()
	case ev.GetSessionBound() != nil:
		// Session writes ride the same stream (ordered, batched); the
		// ledger ignores them: the session digest covers them.
		if ev.GetSessionBound().GetWorker() == nil {
			return "", fmt.Errorf("%w: session bound to no worker", ErrInvalidEvent)
		}
		id = ev.GetSessionBound().GetSessionId()
	case ev.GetSessionEnded() != nil:
		id = ev.GetSessionEnded().GetSessionId()
	default:
		return "", fmt.Errorf("%w: no data", ErrInvalidEvent)
	}
	if id == "" {
		return "", fmt.Errorf("%w: empty request id", ErrInvalidEvent)
	}
	if !utf8.ValidString(id) {
		// proto3 refuses to encode it: one such id would sink a batch.
		return "", fmt.Errorf("%w: request id is not UTF-8", ErrInvalidEvent)
	}
	return id, nil
}

// ledger is this replica's own requests as its published stream describes
// them. Updated under the same lock that stamps Seq, its digest is exactly
// the state after the last stamped Seq, which is what peers compare with.
type ledger struct {
	prefillDone map[string]bool
	digest      Digest
}

func newLedger() *ledger { return &ledger{prefillDone: make(map[string]bool)} }

// apply follows the holder semantics: a duplicate Add and events for
// unknown requests change nothing.
func (l *ledger) apply(ev *messages.SequenceEvent, id string) {
	done, held := l.prefillDone[id]
	switch {
	case ev.GetAdd() != nil:
		if !held {
			l.prefillDone[id] = false
			l.digest.Add(id, false)
		}
	case ev.GetPrefillCompleted() != nil:
		if held && !done {
			l.prefillDone[id] = true
			l.digest.Remove(id, false)
			l.digest.Add(id, true)
		}
	case ev.GetFree() != nil:
		if held {
			delete(l.prefillDone, id)
			l.digest.Remove(id, done)
		}
	}
}
