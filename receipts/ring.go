// Package receipts keeps a replica's recent route receipts: a ring
// bounded both by entries and by bytes, keyed by request id, that the
// scheduler writes and GET /decisions/{request_id} reads.
package receipts

import "sync"

// Ring holds the most recent receipts (JSON) up to MaxEntries of them and
// MaxBytes of JSON, whichever bound is reached first; the oldest go
// first. A receipt for a request id already held replaces it. Safe for
// concurrent use (one writer, the scheduler; readers, the admin API).
type Ring struct {
	maxEntries int
	maxBytes   int

	mu      sync.Mutex
	entries []entry // FIFO: entries[head:] oldest first
	head    int
	bytes   int
	seq     uint64
	byID    map[string]uint64 // request id → its newest entry's seq
}

type entry struct {
	id   string
	seq  uint64
	json []byte
}

// New returns a ring of at most maxEntries receipts and maxBytes bytes of
// JSON (a bound below 1 keeps nothing).
func New(maxEntries, maxBytes int) *Ring {
	return &Ring{maxEntries: maxEntries, maxBytes: maxBytes, byID: make(map[string]uint64)}
}

// Put keeps the receipt of request id (the ring keeps data: the caller
// hands it over). A receipt without an id, or larger than the byte bound
// on its own, is not kept (false).
func (r *Ring) Put(id string, data []byte) bool {
	if r == nil || id == "" || len(data) > r.maxBytes || r.maxEntries < 1 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	r.entries = append(r.entries, entry{id: id, seq: r.seq, json: data})
	r.byID[id] = r.seq
	r.bytes += len(data)
	for r.len() > r.maxEntries || r.bytes > r.maxBytes {
		r.evict()
	}
	// Compact the slice once its dead prefix is as long as the live part.
	if r.head > 0 && r.head >= r.len() {
		n := copy(r.entries, r.entries[r.head:])
		clear(r.entries[n:])
		r.entries, r.head = r.entries[:n], 0
	}
	return true
}

func (r *Ring) len() int { return len(r.entries) - r.head }

func (r *Ring) evict() {
	e := &r.entries[r.head]
	if r.byID[e.id] == e.seq {
		delete(r.byID, e.id)
	}
	r.bytes -= len(e.json)
	*e = entry{}
	r.head++
}

// Get returns the newest receipt of request id.
func (r *Ring) Get(id string) ([]byte, bool) {
	if r == nil {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, ok := r.byID[id]
	if !ok {
		return nil, false
	}
	// Entries are in seq order: binary search the live part.
	lo, hi := r.head, len(r.entries)
	for lo < hi {
		mid := (lo + hi) / 2
		if r.entries[mid].seq < seq {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return r.entries[lo].json, true
}

// Len and Bytes are what the ring holds now.
func (r *Ring) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.len()
}

// Bytes is the JSON the ring holds now.
func (r *Ring) Bytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}
