package cluster

import (
	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/messages"
)

// prefillDoneMix is mixed into a request's hash once its prefill completed,
// so that a lost MarkPrefillCompleted shows up as a digest mismatch too.
const prefillDoneMix = 0x9e3779b97f4a7c15

// Digest summarises the requests one origin owns: how many there are and an
// order-independent hash of their ids and prefill states. Two holders with
// the same requests compute the same Digest whatever order they saw them in.
// The zero value is the digest of no requests.
//
// It is updated incrementally: Add when a request appears, Remove (with the
// same prefillDone) when it goes; a prefill completion is Remove(id, false)
// then Add(id, true).
type Digest struct {
	Count int
	Hash  uint64
}

// requestHash is one request's contribution to a Digest.
func requestHash(id string, prefillDone bool) uint64 {
	h := xxh3.HashString(id)
	if prefillDone {
		// A differently seeded hash rather than a plain xor keeps "done"
		// hashes unrelated to the ids' plain hashes.
		h = xxh3.HashStringSeed(id, prefillDoneMix)
	}
	return h
}

// Add accounts for a request the holder now has.
func (d *Digest) Add(id string, prefillDone bool) {
	d.Count++
	d.Hash += requestHash(id, prefillDone) // wrapping sum: order-independent and invertible
}

// Remove accounts for a request the holder no longer has.
func (d *Digest) Remove(id string, prefillDone bool) {
	d.Count--
	d.Hash -= requestHash(id, prefillDone)
}

// DigestOf computes the Digest of a full state given in the OwnedRequests
// form: an Add per request, followed by a PrefillCompleted for requests
// whose prefill is done. Frees and events for unknown requests are ignored.
func DigestOf(evs []*messages.SequenceEvent) Digest {
	done := make(map[string]bool, len(evs))
	for _, ev := range evs {
		switch {
		case ev.GetAdd() != nil:
			id := ev.GetAdd().GetRequestId()
			if _, dup := done[id]; !dup {
				done[id] = false
			}
		case ev.GetPrefillCompleted() != nil:
			id := ev.GetPrefillCompleted().GetRequestId()
			if _, ok := done[id]; ok {
				done[id] = true
			}
		case ev.GetFree() != nil:
			delete(done, ev.GetFree().GetRequestId())
		}
	}
	var d Digest
	for id, pd := range done {
		d.Add(id, pd)
	}
	return d
}
