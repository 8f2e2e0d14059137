// Package loglimit bounds how often one kind of log line is written, so a
// stream of bad input from outside (garbage events, refused heartbeats,
// undecryptable gossip) cannot flood the log; the caller still counts
// every occurrence in a metric.
package loglimit

import (
	"sync"
	"time"
)

// Limiter lets at most one line through per Every. Its zero value with
// Every set is ready; it is safe for concurrent use.
type Limiter struct {
	Every time.Duration

	mu         sync.Mutex
	last       time.Time
	logged     bool
	suppressed int
}

// Allow reports whether to log now and, when it does, how many lines were
// suppressed since the last one logged (to put in that line).
func (l *Limiter) Allow(now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.logged && now.Sub(l.last) < l.Every {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.logged, l.suppressed = now, true, 0
	return true, n
}
