package sequence

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

// RequestInfo is one active request as snapshots and gossip anti-entropy
// carry it. Output blocks are not included: like Dynamo, output growth is
// local to the replica that streams the response.
type RequestInfo struct {
	ID             string
	Origin         string
	SequenceHashes []kv.SequenceHash
	PromptBlocks   uint64
	ISL            uint64
	// PrefillTokens still to compute; 0 once prefill completed or when the
	// request's prefill is not tracked.
	PrefillTokens        uint64
	TrackPrefill         bool
	PrefillDone          bool
	ExpectedOutputTokens uint64
	StartedAt            time.Time
}

// Requests lists the active requests sorted by id. The hash slices are
// copies the caller may keep.
func (s *ActiveSequences) Requests() []RequestInfo {
	out := make([]RequestInfo, 0, len(s.requests))
	for id, st := range s.requests {
		out = append(out, RequestInfo{
			ID:                   id,
			Origin:               st.origin,
			SequenceHashes:       slices.Clone(st.hashes),
			PromptBlocks:         st.promptBlocks,
			ISL:                  st.isl,
			PrefillTokens:        st.pendingPrefill(),
			TrackPrefill:         st.trackPrefill,
			PrefillDone:          st.prefillDone,
			ExpectedOutputTokens: st.expectedOutput,
			StartedAt:            st.startedAt,
		})
	}
	slices.SortFunc(out, func(a, b RequestInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Restore re-creates a request from a RequestInfo (a snapshot or a peer's
// anti-entropy state), keeping its start time and prefill progress.
func (s *ActiveSequences) Restore(info RequestInfo) error {
	r := Request{
		ID:                   info.ID,
		Origin:               info.Origin,
		SequenceHashes:       info.SequenceHashes,
		PromptBlocks:         info.PromptBlocks,
		ISL:                  info.ISL,
		PrefillTokens:        info.PrefillTokens,
		TrackPrefill:         info.TrackPrefill,
		ExpectedOutputTokens: info.ExpectedOutputTokens,
	}
	if err := validateRequest(r); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if _, dup := s.requests[r.ID]; dup {
		return fmt.Errorf("restore %q: %w", r.ID, ErrDuplicateRequest)
	}
	s.insert(r.ID, &requestState{
		origin:          r.Origin,
		hashes:          slices.Clone(r.SequenceHashes),
		promptBlocks:    s.promptBlocks(r),
		isl:             r.ISL,
		expectedOutput:  r.ExpectedOutputTokens,
		startedAt:       info.StartedAt,
		trackPrefill:    r.TrackPrefill,
		prefillTokens:   r.PrefillTokens,
		prefillDone:     info.PrefillDone,
		exclusiveWeight: 1,
	})
	return nil
}

// ExpireStale frees every request past its end and returns their ids,
// sorted: a leased request (Request.Lease) once its lease ran out, any
// other once it started more than ExpiryDuration before now. It is the
// only cure for phantom load left by a lost Free; the owner calls it
// periodically (Dynamo checks every 30 s).
func (s *ActiveSequences) ExpireStale(now time.Time) []string {
	return s.freeWhere(func(st *requestState) bool { return s.expired(st, now) })
}

// Expired counts the requests ExpireStale(now) would free: leased ones
// (their lease ran out) and the others (older than ExpiryDuration).
func (s *ActiveSequences) Expired(now time.Time) (leased, stale int) {
	for _, st := range s.requests {
		switch {
		case !s.expired(st, now):
		case st.leaseEnd.IsZero():
			stale++
		default:
			leased++
		}
	}
	return leased, stale
}

func (s *ActiveSequences) expired(st *requestState, now time.Time) bool {
	if !st.leaseEnd.IsZero() {
		return now.After(st.leaseEnd)
	}
	return now.Sub(st.startedAt) > s.cfg.ExpiryDuration
}

// Renew extends a leased request's lease to at least d from now (a lease
// never shrinks); a request without a lease is left alone. It returns
// when the lease now ends (zero: not leased), or ErrUnknownRequest.
func (s *ActiveSequences) Renew(id string, now time.Time, d time.Duration) (time.Time, error) {
	st, ok := s.requests[id]
	if !ok {
		return time.Time{}, fmt.Errorf("renew %q: %w", id, ErrUnknownRequest)
	}
	if st.leaseEnd.IsZero() {
		return time.Time{}, nil
	}
	if end := now.Add(d); end.After(st.leaseEnd) {
		st.leaseEnd = end
	}
	return st.leaseEnd, nil
}

// LeaseEnd is when a request's lease ends (zero: not leased); ok is false
// for an unknown id.
func (s *ActiveSequences) LeaseEnd(id string) (end time.Time, ok bool) {
	st, ok := s.requests[id]
	if !ok {
		return time.Time{}, false
	}
	return st.leaseEnd, true
}

// FreeOrigin frees every request owned by a router replica (used when that
// replica is declared dead) and returns their ids, sorted. Origin "" is
// this replica's own requests.
func (s *ActiveSequences) FreeOrigin(origin string) []string {
	return s.freeWhere(func(st *requestState) bool { return st.origin == origin })
}

func (s *ActiveSequences) freeWhere(match func(*requestState) bool) []string {
	var ids []string
	for id, st := range s.requests {
		if match(st) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		s.remove(id, s.requests[id])
	}
	return ids
}

// ExpectedOutput is a request's expected output tokens (0: unknown or not
// active).
func (s *ActiveSequences) ExpectedOutput(id string) uint64 {
	if st, ok := s.requests[id]; ok {
		return st.expectedOutput
	}
	return 0
}
