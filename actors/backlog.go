package actors

import (
	"sync/atomic"
	"time"
)

// backlog counts the messages sent to one actor and not yet processed, so
// its senders bound its mailbox: protoactor's mailboxes are unbounded, and
// a publisher faster than the actor would otherwise grow it without end.
type backlog struct {
	n     atomic.Int64
	limit int64
}

func newBacklog(limit int) *backlog { return &backlog{limit: int64(limit)} }

// tryAdd reserves k slots; false when that would pass the bound.
func (b *backlog) tryAdd(k int) bool {
	if b.n.Add(int64(k)) > b.limit {
		b.n.Add(-int64(k))
		return false
	}
	return true
}

// wait reserves k slots, waiting up to patience for the actor to catch up:
// the caller (a KV-event subscription) is slowed down, which is the
// back-pressure NATS and JetStream flow control understand.
func (b *backlog) wait(k int, patience time.Duration) bool {
	if b.tryAdd(k) {
		return true
	}
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		if b.tryAdd(k) {
			return true
		}
	}
	return false
}

// done releases k slots once the actor processed what they stood for.
func (b *backlog) done(k int) { b.n.Add(-int64(k)) }
