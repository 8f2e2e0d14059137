package loglimit

import (
	"sync"
	"time"
)

// DefaultMaxKeys bounds the keys a Keyed limiter remembers.
const DefaultMaxKeys = 4096

// Keyed rate-limits log lines per key (a worker, say): the first line of
// a key goes through at once, later ones of that key at most once per
// Every. A condition that persists for one source (a worker refused on
// every heartbeat) is reported when it starts and then now and again,
// and one source's repeats never hold back another's first line. It
// remembers at most MaxKeys keys (DefaultMaxKeys when zero); past that it
// forgets one, whose next line then counts as a first again, so memory
// stays bounded whatever the keys. Its zero value with Every set is
// ready; it is safe for concurrent use.
type Keyed[K comparable] struct {
	Every   time.Duration
	MaxKeys int

	mu   sync.Mutex
	keys map[K]*keyState
}

type keyState struct {
	last       time.Time
	suppressed int
}

// Allow reports whether to log now for key, whether this is the key's
// first line, and how many of its lines were suppressed since the last
// one logged.
func (k *Keyed[K]) Allow(key K, now time.Time) (ok, first bool, suppressed int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.keys[key]
	if st == nil {
		if k.keys == nil {
			k.keys = map[K]*keyState{}
		}
		limit := k.MaxKeys
		if limit <= 0 {
			limit = DefaultMaxKeys
		}
		for victim := range k.keys {
			if len(k.keys) < limit {
				break
			}
			delete(k.keys, victim)
		}
		k.keys[key] = &keyState{last: now}
		return true, true, 0
	}
	if now.Sub(st.last) < k.Every {
		st.suppressed++
		return false, false, 0
	}
	n := st.suppressed
	st.last, st.suppressed = now, 0
	return true, false, n
}

// Forget drops a key (its source went away), so its next line is a first.
func (k *Keyed[K]) Forget(key K) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.keys, key)
}
