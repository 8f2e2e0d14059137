package actors

import (
	"context"
	"time"
)

// digestDutyFactor bounds the share of the shards' time that index digests
// may take: after a walk that took d, the next starts no sooner than
// digestDutyFactor×d later, so digests take at most 1/(1+factor) of it.
const digestDutyFactor = 9

// digestGate serialises index digests and spaces them out. A digest walks
// every entry of every shard (about 110 ms per 4 M entries on the
// reference machine) and a shard answers no lookup while it walks, so
// GET /workers?digest=1 in a loop, or many callers at once, must not turn
// into shards that do nothing else. On a small index a walk takes
// microseconds and the spacing is invisible.
type digestGate struct {
	turn chan struct{} // holds a token while a walk is waited for or runs
	next time.Time     // when the next walk may start; guarded by turn
}

func newDigestGate() *digestGate { return &digestGate{turn: make(chan struct{}, 1)} }

// acquire waits for the previous walk to end and for the spacing after
// it, then returns the release that records this walk's duration.
func (g *digestGate) acquire(ctx context.Context) (func(), error) {
	select {
	case g.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if wait := time.Until(g.next); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			<-g.turn
			return nil, ctx.Err()
		}
	}
	start := time.Now()
	return func() {
		g.next = time.Now().Add(digestDutyFactor * time.Since(start))
		<-g.turn
	}, nil
}
