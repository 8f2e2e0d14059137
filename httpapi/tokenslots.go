package httpapi

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// tokenSlots bounds how many prompts the router tokenizes at once (chat
// rendering and encoding with its own tokenizers; engine tokenization
// costs the router no CPU and is not counted). A prompt's CPU is bounded
// by --max-prompt-tokens, but pathological text costs tens of times what
// English does per token, so without a bound enough such prompts in
// parallel would hold every core and starve routing and KV-event
// ingestion. A request that finds every slot busy waits up to its queue
// timeout, then gets 503 (busyError) and is counted.
//
// Who reaches it: every data-plane request with a text prompt or
// messages. What bounds it: the slots (--tokenize-concurrency, default
// one less than GOMAXPROCS, at least 1); the waiters are requests already
// admitted by the HTTP connection caps, each waiting at most the timeout.
type tokenSlots struct {
	slots chan struct{}
	wait  time.Duration
}

// DefaultTokenizeConcurrency leaves one of GOMAXPROCS to routing and
// ingestion (at least one slot).
func DefaultTokenizeConcurrency() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// DefaultTokenizeQueueTimeout is how long a prompt waits for a slot.
const DefaultTokenizeQueueTimeout = 2 * time.Second

func newTokenSlots(n int, wait time.Duration) *tokenSlots {
	if n <= 0 {
		n = DefaultTokenizeConcurrency()
	}
	if wait <= 0 {
		wait = DefaultTokenizeQueueTimeout
	}
	return &tokenSlots{slots: make(chan struct{}, n), wait: wait}
}

// busyError is a prompt that found every tokenization slot taken for the
// whole queue timeout.
type busyError struct {
	slots int
	wait  time.Duration
}

func (e *busyError) Error() string {
	return fmt.Sprintf("the router is busy tokenizing other prompts (%d at once); none finished within %v: retry later", e.slots, e.wait)
}

// acquire takes a slot, waiting up to the queue timeout; release gives it
// back. ctx ending while it waits is returned as ctx's error.
func (t *tokenSlots) acquire(ctx context.Context) (release func(), err error) {
	select {
	case t.slots <- struct{}{}:
		return t.release, nil
	default:
	}
	timer := time.NewTimer(t.wait)
	defer timer.Stop()
	select {
	case t.slots <- struct{}{}:
		return t.release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return nil, &busyError{slots: cap(t.slots), wait: t.wait}
	}
}

func (t *tokenSlots) release() { <-t.slots }

// inFlight is how many prompts are being tokenized now.
func (t *tokenSlots) inFlight() int { return len(t.slots) }
