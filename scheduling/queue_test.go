package scheduling

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

var q0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type pushAt struct {
	id          string
	atSec       float64
	isl, cached uint64
	jump        float64
}

func drain[T any](q *Queue[T]) []string {
	var ids []string
	for {
		w, ok := q.Pop()
		if !ok {
			return ids
		}
		ids = append(ids, w.ID)
	}
}

func TestQueueOrdering(t *testing.T) {
	tests := []struct {
		name   string
		policy QueuePolicy
		pushes []pushAt
		want   []string
	}{
		{"fcfs: arrival order", PolicyFCFS, []pushAt{
			{id: "a", atSec: 0}, {id: "b", atSec: 1}, {id: "c", atSec: 2},
		}, []string{"a", "b", "c"}},
		{"fcfs: a jump of 5 s overtakes 5 s of waiting, not more", PolicyFCFS, []pushAt{
			{id: "a", atSec: 0}, {id: "b", atSec: 4}, {id: "c", atSec: 6, jump: 5}, {id: "d", atSec: 7},
		}, []string{"a", "c", "b", "d"}},
		{"fcfs: negative jump counts as 0", PolicyFCFS, []pushAt{
			{id: "a", atSec: 0, jump: -100}, {id: "b", atSec: 1},
		}, []string{"a", "b"}},
		{"fcfs: equal keys stay first in first out", PolicyFCFS, []pushAt{
			{id: "a", atSec: 1}, {id: "b", atSec: 1}, {id: "c", atSec: 1},
		}, []string{"a", "b", "c"}},
		{"wspt: fewest uncached tokens first", PolicyWSPT, []pushAt{
			{id: "long", atSec: 0, isl: 4096}, {id: "short", atSec: 1, isl: 128}, {id: "mostly-cached", atSec: 2, isl: 8192, cached: 8100},
		}, []string{"mostly-cached", "short", "long"}},
		{"wspt: priority weighs", PolicyWSPT, []pushAt{
			{id: "small", atSec: 0, isl: 100}, {id: "big-urgent", atSec: 1, isl: 300, jump: 3},
		}, []string{"big-urgent", "small"}}, // 4/300 > 1/100
		{"wspt: fully cached counts one token", PolicyWSPT, []pushAt{
			{id: "one", atSec: 0, isl: 1}, {id: "cached", atSec: 1, isl: 64, cached: 64},
		}, []string{"one", "cached"}},
		{"lcfs: newest first", PolicyLCFS, []pushAt{
			{id: "a", atSec: 0}, {id: "b", atSec: 1}, {id: "c", atSec: 2},
		}, []string{"c", "b", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := NewQueue[int](tt.policy, 16)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range tt.pushes {
				at := q0.Add(time.Duration(p.atSec * float64(time.Second)))
				if err := q.Push(Waiting[int]{ID: p.id, ISL: p.isl, CachedTokens: p.cached, PriorityJump: p.jump, Payload: i}, at); err != nil {
					t.Fatal(err)
				}
			}
			if got := drain(q); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("order %v, want %v", got, tt.want)
			}
		})
	}
}

func TestQueueFull(t *testing.T) {
	q, err := NewQueue[string](PolicyFCFS, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := q.Push(Waiting[string]{ID: id, Payload: "p-" + id}, q0); err != nil {
			t.Fatal(err)
		}
	}
	err = q.Push(Waiting[string]{ID: "c"}, q0)
	if !errors.Is(err, ErrOverloaded) {
		t.Fatalf("err = %v, want ErrOverloaded", err)
	}
	var oe *OverloadError
	if !errors.As(err, &oe) || oe.QueueDepth != 2 || oe.Limit != 2 {
		t.Fatalf("err = %#v, want *OverloadError{2, 2}", err)
	}
	if q.Len() != 2 {
		t.Fatalf("rejected push changed the queue: len %d", q.Len())
	}
	w, ok := q.Pop()
	if !ok || w.ID != "a" || w.Payload != "p-a" || !w.EnqueuedAt.Equal(q0) {
		t.Fatalf("Pop = %+v, %v", w, ok)
	}
	if err := q.Push(Waiting[string]{ID: "c"}, q0); err != nil {
		t.Fatalf("push after pop: %v", err)
	}
}

func TestQueueRejects(t *testing.T) {
	q, err := NewQueue[int](PolicyWSPT, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Push(Waiting[int]{ID: "a"}, q0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		item Waiting[int]
		want error
	}{
		{"duplicate", Waiting[int]{ID: "a"}, ErrDuplicateWaiting},
		{"empty id", Waiting[int]{}, ErrInvalidInput},
		{"NaN jump", Waiting[int]{ID: "x", PriorityJump: math.NaN()}, ErrInvalidInput},
		{"infinite jump", Waiting[int]{ID: "y", PriorityJump: math.Inf(1)}, ErrInvalidInput},
	}
	for _, tt := range tests {
		if err := q.Push(tt.item, q0); !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
	if q.Len() != 1 {
		t.Fatalf("len %d after rejected pushes", q.Len())
	}
	for _, bad := range []struct {
		policy QueuePolicy
		limit  int
	}{{"random", 4}, {PolicyFCFS, 0}, {PolicyFCFS, -1}, {PolicyFCFS, MaxQueueLengthCeiling + 1}} {
		if _, err := NewQueue[int](bad.policy, bad.limit); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewQueue(%q, %d) err = %v", bad.policy, bad.limit, err)
		}
	}
}

func TestQueueRemoveAndDrop(t *testing.T) {
	q, err := NewQueue[int](PolicyFCFS, 8)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		if err := q.Push(Waiting[int]{ID: id, Payload: i}, q0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if w, ok := q.Remove("c"); !ok || w.Payload != 2 {
		t.Fatalf("Remove(c) = %+v, %v", w, ok)
	}
	if _, ok := q.Remove("c"); ok {
		t.Fatal("removed c twice")
	}
	if w, ok := q.Peek(); !ok || w.ID != "a" || q.Len() != 4 {
		t.Fatalf("Peek = %+v, %v, len %d", w, ok, q.Len())
	}
	dropped := q.DropEnqueuedBefore(q0.Add(3 * time.Second)) // a, b (c is gone)
	var ids []string
	for _, w := range dropped {
		ids = append(ids, w.ID)
	}
	if !reflect.DeepEqual(ids, []string{"a", "b"}) {
		t.Fatalf("dropped %v", ids)
	}
	if got := drain(q); !reflect.DeepEqual(got, []string{"d", "e"}) {
		t.Fatalf("left %v", got)
	}
	if _, ok := q.Pop(); ok {
		t.Fatal("pop from empty queue")
	}
	if _, ok := q.Peek(); ok {
		t.Fatal("peek into empty queue")
	}
	if q.DropEnqueuedBefore(q0.Add(time.Hour)) != nil {
		t.Fatal("drop from empty queue returned items")
	}
	// An id can wait again once it left.
	if err := q.Push(Waiting[int]{ID: "a"}, q0); err != nil {
		t.Fatalf("re-push: %v", err)
	}
}
