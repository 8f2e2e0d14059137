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

// ExpireStale frees every request that started more than ExpiryDuration
// before now and returns their ids, sorted. It is the only cure for phantom
// load left by a lost Free; the owner calls it periodically (Dynamo checks
// every 30 s).
func (s *ActiveSequences) ExpireStale(now time.Time) []string {
	return s.freeWhere(func(st *requestState) bool {
		return now.Sub(st.startedAt) > s.cfg.ExpiryDuration
	})
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
