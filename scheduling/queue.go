package scheduling

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

var (
	// ErrOverloaded is matched (errors.Is) by every *OverloadError.
	ErrOverloaded = errors.New("router overloaded")
	// ErrDuplicateWaiting: Push of an id that is already waiting.
	ErrDuplicateWaiting = errors.New("request already waiting")
)

// OverloadError rejects a request because the waiting queue is full; the
// HTTP edge maps it to 429 (Dynamo answers 529).
type OverloadError struct {
	QueueDepth int
	Limit      int
}

func (e *OverloadError) Error() string {
	return fmt.Sprintf("router queue full: %d waiting, limit %d", e.QueueDepth, e.Limit)
}

// Is makes errors.Is(err, ErrOverloaded) true.
func (e *OverloadError) Is(target error) bool { return target == ErrOverloaded }

// Waiting is a request parked because every eligible worker is overloaded.
type Waiting[T any] struct {
	ID string
	// ISL and CachedTokens (the best cache hit over eligible workers) give
	// WSPT its processing-time estimate, ISL − CachedTokens.
	ISL          uint64
	CachedTokens uint64
	// PriorityJump moves a request ahead, in seconds of waiting for fcfs
	// and as a weight for wspt. Negative values count as 0 (as Dynamo).
	PriorityJump float64
	Payload      T
	// EnqueuedAt is set by Push.
	EnqueuedAt time.Time
}

type queueEntry[T any] struct {
	item  Waiting[T]
	key   float64
	seq   uint64 // FIFO among equal keys
	index int
}

// Queue is a bounded priority queue of waiting requests: the highest key
// (per policy) pops first, equal keys in arrival order. Push, Pop and
// Remove are O(log n).
type Queue[T any] struct {
	policy   QueuePolicy
	limit    int
	epoch    time.Time // arrival offsets are measured from the first push
	hasEpoch bool
	nextSeq  uint64
	entries  entryHeap[T]
	byID     map[string]*queueEntry[T]
}

// NewQueue returns an empty queue holding at most limit requests.
func NewQueue[T any](policy QueuePolicy, limit int) (*Queue[T], error) {
	if _, err := ParseQueuePolicy(string(policy)); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > MaxQueueLengthCeiling {
		return nil, fmt.Errorf("queue limit must be in [1,%d], got %d: %w", MaxQueueLengthCeiling, limit, ErrInvalidConfig)
	}
	return &Queue[T]{policy: policy, limit: limit, byID: make(map[string]*queueEntry[T])}, nil
}

// Len is the number of waiting requests.
func (q *Queue[T]) Len() int { return len(q.entries) }

// Limit is the capacity.
func (q *Queue[T]) Limit() int { return q.limit }

// Policy is the ordering in use.
func (q *Queue[T]) Policy() QueuePolicy { return q.policy }

// Push parks item, arriving at now. A full queue returns *OverloadError;
// an empty or duplicate id, or a NaN/infinite priority jump, is rejected.
func (q *Queue[T]) Push(item Waiting[T], now time.Time) error {
	if item.ID == "" {
		return fmt.Errorf("queue push: empty request id: %w", ErrInvalidInput)
	}
	if math.IsNaN(item.PriorityJump) || math.IsInf(item.PriorityJump, 0) {
		return fmt.Errorf("queue push %q: priority jump %v: %w", item.ID, item.PriorityJump, ErrInvalidInput)
	}
	if _, dup := q.byID[item.ID]; dup {
		return fmt.Errorf("queue push %q: %w", item.ID, ErrDuplicateWaiting)
	}
	if len(q.entries) >= q.limit {
		return &OverloadError{QueueDepth: len(q.entries), Limit: q.limit}
	}
	if !q.hasEpoch {
		q.epoch, q.hasEpoch = now, true
	}
	item.EnqueuedAt = now
	e := &queueEntry[T]{item: item, key: q.key(item, now.Sub(q.epoch)), seq: q.nextSeq}
	q.nextSeq++
	heap.Push(&q.entries, e)
	q.byID[item.ID] = e
	return nil
}

// key is Dynamo's enqueue key for the policy; higher pops first.
func (q *Queue[T]) key(item Waiting[T], arrivalOffset time.Duration) float64 {
	jump := max(item.PriorityJump, 0)
	switch q.policy {
	case PolicyWSPT:
		newTokens := uint64(1)
		if item.ISL > item.CachedTokens {
			newTokens = item.ISL - item.CachedTokens
		}
		return (1 + jump) / float64(newTokens)
	case PolicyLCFS:
		return jump + arrivalOffset.Seconds()
	default:
		return jump - arrivalOffset.Seconds()
	}
}

// Peek returns the next request without removing it.
func (q *Queue[T]) Peek() (Waiting[T], bool) {
	if len(q.entries) == 0 {
		return Waiting[T]{}, false
	}
	return q.entries[0].item, true
}

// Pop removes and returns the highest-priority request.
func (q *Queue[T]) Pop() (Waiting[T], bool) {
	if len(q.entries) == 0 {
		return Waiting[T]{}, false
	}
	e := heap.Pop(&q.entries).(*queueEntry[T])
	delete(q.byID, e.item.ID)
	return e.item, true
}

// Remove takes out a waiting request (cancelled by its client).
func (q *Queue[T]) Remove(id string) (Waiting[T], bool) {
	e, ok := q.byID[id]
	if !ok {
		return Waiting[T]{}, false
	}
	heap.Remove(&q.entries, e.index)
	delete(q.byID, id)
	return e.item, true
}

// DropEnqueuedBefore removes every request enqueued before cutoff (they
// waited too long and will be rejected) and returns them oldest first.
func (q *Queue[T]) DropEnqueuedBefore(cutoff time.Time) []Waiting[T] {
	var dropped []*queueEntry[T]
	for _, e := range q.entries {
		if e.item.EnqueuedAt.Before(cutoff) {
			dropped = append(dropped, e)
		}
	}
	if len(dropped) == 0 {
		return nil
	}
	slices.SortFunc(dropped, func(a, b *queueEntry[T]) int {
		return cmp.Compare(a.seq, b.seq)
	})
	out := make([]Waiting[T], len(dropped))
	for i, e := range dropped {
		heap.Remove(&q.entries, e.index)
		delete(q.byID, e.item.ID)
		out[i] = e.item
	}
	return out
}

// entryHeap implements heap.Interface as a max-heap on (key, −seq).
type entryHeap[T any] []*queueEntry[T]

func (h entryHeap[T]) Len() int { return len(h) }

func (h entryHeap[T]) Less(i, j int) bool {
	if h[i].key != h[j].key {
		return h[i].key > h[j].key
	}
	return h[i].seq < h[j].seq
}

func (h entryHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *entryHeap[T]) Push(x any) {
	e := x.(*queueEntry[T])
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *entryHeap[T]) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return e
}
