package actors

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDigestGateSpacesWalks: after a walk that took d, the next waits
// about digestDutyFactor×d; a caller whose context ends while waiting gets
// its error and leaves the turn free for the next caller.
func TestDigestGateSpacesWalks(t *testing.T) {
	g := newDigestGate()
	release, err := g.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const walk = 20 * time.Millisecond
	time.Sleep(walk)
	release()
	ended := time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), walk)
	defer cancel()
	if _, err := g.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire within the spacing = %v, want the context's deadline", err)
	}

	release, err = g.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	release()
	if waited := time.Since(ended); waited < digestDutyFactor*walk {
		t.Fatalf("the next walk started %v after a %v walk, want >= %v", waited, walk, digestDutyFactor*walk)
	}
}

// TestDigestGateIsExclusive: a second caller waits while a walk runs.
func TestDigestGateIsExclusive(t *testing.T) {
	g := newDigestGate()
	release, err := g.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := g.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire during a walk = %v, want to wait until the deadline", err)
	}
	release()
}
