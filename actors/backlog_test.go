package actors

import (
	"testing"
	"time"
)

func TestBacklogBound(t *testing.T) {
	b := newBacklog(3)
	if !b.tryAdd(2) || !b.tryAdd(1) || b.tryAdd(1) {
		t.Fatal("bound of 3 not enforced")
	}
	if b.wait(1, 5*time.Millisecond) {
		t.Fatal("wait admitted past the bound with nobody draining")
	}
	go func() { time.Sleep(2 * time.Millisecond); b.done(2) }()
	if !b.wait(2, 5*time.Second) {
		t.Fatal("wait did not admit once the actor caught up")
	}
	if b.n.Load() != 3 {
		t.Fatalf("backlog %d, want 3", b.n.Load())
	}
}
