package natsbus

import (
	"sync"
	"time"
)

// logLimiter lets at most one log line through per interval, so a
// stream of garbage cannot flood the logs; what it suppresses is still
// counted by the caller.
type logLimiter struct {
	mu      sync.Mutex
	every   time.Duration
	last    time.Time
	dropped int
}

// allow reports whether to log now and how many lines were suppressed
// since the last one.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.last) < l.every {
		l.dropped++
		return false, 0
	}
	l.last = now
	n := l.dropped
	l.dropped = 0
	return true, n
}
