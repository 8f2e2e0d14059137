package cluster

import (
	"math/rand/v2"
	"testing"

	"github.com/kvrouter/kvrouter/messages"
)

func TestDigestIsOrderIndependentAndInvertible(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	var forward, backward Digest
	for _, id := range ids {
		forward.Add(id, id == "c")
	}
	for i := len(ids) - 1; i >= 0; i-- {
		backward.Add(ids[i], ids[i] == "c")
	}
	if forward != backward {
		t.Fatalf("order changed the digest: %+v vs %+v", forward, backward)
	}
	var d Digest
	d.Add("x", false)
	d.Remove("x", false)
	if d != (Digest{}) {
		t.Fatalf("add then remove = %+v, want zero", d)
	}
}

func TestDigestDistinguishes(t *testing.T) {
	digestOf := func(ids []string, done map[string]bool) Digest {
		var d Digest
		for _, id := range ids {
			d.Add(id, done[id])
		}
		return d
	}
	base := digestOf([]string{"a", "b"}, nil)
	tests := []struct {
		name string
		d    Digest
	}{
		{"different id", digestOf([]string{"a", "c"}, nil)},
		{"missing id", digestOf([]string{"a"}, nil)},
		{"prefill done", digestOf([]string{"a", "b"}, map[string]bool{"b": true})},
		{"duplicate counted twice", digestOf([]string{"a", "b", "b"}, nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.d == base {
				t.Fatalf("digest %+v equals the base", tt.d)
			}
		})
	}
}

func TestDigestOfMatchesLedger(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l := newLedger()
	var stream []*messages.SequenceEvent
	for range 2000 {
		id := string(rune('a' + rng.IntN(40)))
		var ev *messages.SequenceEvent
		switch rng.IntN(3) {
		case 0:
			ev = addEvent(id)
		case 1:
			ev = prefillEvent(id)
		default:
			ev = freeEvent(id)
		}
		l.apply(ev, id)
		stream = append(stream, ev)
	}
	if got := DigestOf(stream); got != l.digest {
		t.Fatalf("DigestOf(stream) = %+v, ledger = %+v", got, l.digest)
	}
	if l.digest.Count != len(l.prefillDone) {
		t.Fatalf("ledger count %d, holds %d", l.digest.Count, len(l.prefillDone))
	}
	// The OwnedRequests form of the ledger digests the same.
	var owned []*messages.SequenceEvent
	for id, done := range l.prefillDone {
		owned = append(owned, addEvent(id))
		if done {
			owned = append(owned, prefillEvent(id))
		}
	}
	if got := DigestOf(owned); got != l.digest {
		t.Fatalf("DigestOf(owned) = %+v, ledger = %+v", got, l.digest)
	}
}

func TestLedgerFollowsHolderSemantics(t *testing.T) {
	tests := []struct {
		name   string
		events []*messages.SequenceEvent
		want   map[string]bool
	}{
		{"add", []*messages.SequenceEvent{addEvent("a")}, map[string]bool{"a": false}},
		{"duplicate add keeps prefill", []*messages.SequenceEvent{addEvent("a"), prefillEvent("a"), addEvent("a")}, map[string]bool{"a": true}},
		{"free unknown", []*messages.SequenceEvent{freeEvent("a")}, map[string]bool{}},
		{"prefill unknown", []*messages.SequenceEvent{prefillEvent("a")}, map[string]bool{}},
		{"add free", []*messages.SequenceEvent{addEvent("a"), prefillEvent("a"), freeEvent("a")}, map[string]bool{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger()
			for _, ev := range tt.events {
				id, err := eventRequestID(ev)
				if err != nil {
					t.Fatal(err)
				}
				l.apply(ev, id)
			}
			var want Digest
			for id, done := range tt.want {
				want.Add(id, done)
			}
			if l.digest != want || len(l.prefillDone) != len(tt.want) {
				t.Fatalf("ledger %v (%+v), want %v (%+v)", l.prefillDone, l.digest, tt.want, want)
			}
		})
	}
}
