// Package sequence tracks the requests in flight on one worker rank, the
// way Dynamo's ActiveSequences does: how many prompt tokens are still to be
// prefilled and how many KV blocks the rank holds for active requests.
//
// Prompt blocks are keyed by sequence hash and reference-counted, so a
// prefix shared by several requests is counted once (when AssumeKVReuse).
// Every operation costs O(blocks of the request it touches); Load is O(1).
//
// The package is pure: no goroutines, no clock (time is passed in), no
// locks. One ActiveSequences belongs to one owner (the rank's actor).
package sequence

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/kv"
)

var (
	// ErrDuplicateRequest: AddRequest with an id that is already active.
	ErrDuplicateRequest = errors.New("request already active")
	// ErrUnknownRequest: the id is not (or no longer) active.
	ErrUnknownRequest = errors.New("unknown request")
	// ErrInvalidRequest: the request's fields contradict each other.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrOutputTrackingDisabled: AddOutputBlock without TrackOutputBlocks.
	ErrOutputTrackingDisabled = errors.New("output block tracking is disabled")
	// ErrInvalidDecay: a decay fraction outside [0, 1].
	ErrInvalidDecay = errors.New("decay fraction must be in [0, 1]")
)

// Request is a routing decision to record on this rank.
type Request struct {
	ID string
	// Origin is the router replica that owns the request; "" means this
	// replica. FreeOrigin drops everything of a dead replica.
	Origin string
	// SequenceHashes are the prompt's chained block hashes, sampled with
	// the tracker's stride (see Sample).
	SequenceHashes []kv.SequenceHash
	// PromptBlocks is the prompt's full-block count; 0 means it is
	// len(SequenceHashes)·stride (no trailing partial group).
	PromptBlocks uint64
	// ISL is the prompt length in tokens.
	ISL uint64
	// PrefillTokens is what the engine still has to compute: ISL minus the
	// tokens it already holds in cache on this rank.
	PrefillTokens uint64
	// TrackPrefill counts PrefillTokens in the rank's prefill load until
	// prefill completes (router_track_prefill_tokens).
	TrackPrefill         bool
	ExpectedOutputTokens uint64
	// Lease, when positive, makes the request expire Lease after it
	// was added unless renewed (Renew); 0: it expires ExpiryDuration after
	// it started (a peer's request, or leases off). See LeasePolicy.
	Lease time.Duration
}

// Load is what the scheduler's cost function reads.
type Load struct {
	// ActivePrefillTokens sums the prompt tokens still to be prefilled.
	ActivePrefillTokens uint64
	// ActiveBlocks counts the unique prompt blocks held by active requests
	// plus their output blocks, each weighted by its decay fraction.
	ActiveBlocks   float64
	ActiveRequests int
}

type requestState struct {
	origin         string
	hashes         []kv.SequenceHash // sampled with the stride
	promptBlocks   uint64
	isl            uint64
	expectedOutput uint64
	startedAt      time.Time
	// leaseEnd is when a leased request expires (zero: not leased).
	leaseEnd time.Time

	trackPrefill  bool
	prefillTokens uint64 // counted in the load while !prefillDone
	prefillDone   bool

	// exclusiveBlocks are blocks no other request can share: prompt blocks
	// when AssumeKVReuse is off or when no sampled hash covers them (a
	// trailing group shorter than the stride), and every output block. They all carry
	// exclusiveWeight, the request's latest decay fraction.
	promptPrivate   int
	outputBlocks    int
	exclusiveWeight float64
}

func (r *requestState) exclusiveBlocks() int { return r.promptPrivate + r.outputBlocks }

func (r *requestState) pendingPrefill() uint64 {
	if r.trackPrefill && !r.prefillDone {
		return r.prefillTokens
	}
	return 0
}

// ActiveSequences is the set of active requests of one worker rank.
type ActiveSequences struct {
	cfg      Config
	requests map[string]*requestState
	chains   chainSet // the active prompt blocks (AssumeKVReuse): see chainSet

	prefillTokens   uint64
	sharedWeight    float64 // Σ weight over blocks
	exclusiveWeight float64 // Σ exclusiveBlocks·exclusiveWeight over requests

	// prefillOrder lists requests that entered with prefill to do, in the
	// order they were added: the engine prefills in that order, so the
	// first one still pending is the head of its queue (HeadPrefill).
	// Entries of requests done or gone are dropped lazily.
	prefillOrder []prefillEntry

	// rootChanges journals the prompt roots (see Roots) that appeared or
	// disappeared since the last TakeRootChanges, in order.
	rootChanges []rootChange
}

type rootChange struct {
	hash    kv.SequenceHash
	present bool
}

type prefillEntry struct {
	id    string
	state *requestState // the entry is stale if the id now names another request
}

// New returns an empty tracker. A non-positive ExpiryDuration means
// DefaultExpiryDuration.
func New(cfg Config) *ActiveSequences {
	if cfg.ExpiryDuration <= 0 {
		cfg.ExpiryDuration = DefaultExpiryDuration
	}
	return &ActiveSequences{
		cfg:      cfg,
		requests: make(map[string]*requestState),
	}
}

// Config returns the configuration in effect.
func (s *ActiveSequences) Config() Config { return s.cfg }

// Has reports whether id is active.
func (s *ActiveSequences) Has(id string) bool {
	_, ok := s.requests[id]
	return ok
}

// AddRequest records r as started at now; it keeps r.SequenceHashes, which
// the caller must not modify afterwards. A duplicate id is rejected with
// ErrDuplicateRequest and leaves the state unchanged (Dynamo ignores it
// with an error log; the caller decides here).
func (s *ActiveSequences) AddRequest(r Request, now time.Time) error {
	if err := validateRequest(r); err != nil {
		return err
	}
	if _, dup := s.requests[r.ID]; dup {
		return fmt.Errorf("add %q: %w", r.ID, ErrDuplicateRequest)
	}
	st := &requestState{
		origin:          r.Origin,
		hashes:          r.SequenceHashes,
		promptBlocks:    s.promptBlocks(r),
		isl:             r.ISL,
		expectedOutput:  r.ExpectedOutputTokens,
		startedAt:       now,
		trackPrefill:    r.TrackPrefill,
		prefillTokens:   r.PrefillTokens,
		exclusiveWeight: 1,
	}
	if r.Lease > 0 {
		st.leaseEnd = now.Add(r.Lease)
	}
	s.insert(r.ID, st)
	return nil
}

// promptBlocks is r's block count, defaulted from its sampled hashes.
func (s *ActiveSequences) promptBlocks(r Request) uint64 {
	covered := uint64(len(r.SequenceHashes)) * uint64(s.cfg.EffectiveStride())
	return max(r.PromptBlocks, covered)
}

func validateRequest(r Request) error {
	if r.ID == "" {
		return fmt.Errorf("add: empty request id: %w", ErrInvalidRequest)
	}
	if r.PrefillTokens > r.ISL {
		return fmt.Errorf("add %q: prefill tokens %d exceed isl %d: %w",
			r.ID, r.PrefillTokens, r.ISL, ErrInvalidRequest)
	}
	return nil
}

// insert accounts a fully built request state. Each shared-map entry is
// one sampled hash standing for stride blocks.
func (s *ActiveSequences) insert(id string, st *requestState) {
	if s.cfg.AssumeKVReuse {
		delta, root := s.chains.add(st.hashes, float64(s.cfg.EffectiveStride()))
		s.sharedWeight += delta
		if root {
			s.rootChanges = append(s.rootChanges, rootChange{hash: st.hashes[0], present: true})
		}
		st.promptPrivate = int(st.promptBlocks) - len(st.hashes)*s.cfg.EffectiveStride()
	} else {
		st.promptPrivate = int(st.promptBlocks)
	}
	s.exclusiveWeight += float64(st.exclusiveBlocks()) * st.exclusiveWeight
	s.prefillTokens += st.pendingPrefill()
	s.requests[id] = st
	if st.pendingPrefill() > 0 {
		s.prefillOrder = append(s.prefillOrder, prefillEntry{id: id, state: st})
	}
}

// MarkPrefillCompleted removes the request's prompt tokens from the prefill
// load (the engine produced the first token). Marking twice is harmless.
func (s *ActiveSequences) MarkPrefillCompleted(id string) error {
	st, ok := s.requests[id]
	if !ok {
		return fmt.Errorf("mark prefill %q: %w", id, ErrUnknownRequest)
	}
	s.prefillTokens -= st.pendingPrefill()
	st.prefillDone = true
	s.compactPrefillOrder()
	return nil
}

// Free drops the request and its block references; it implies
// MarkPrefillCompleted. Freeing an unknown (or already freed) id returns
// ErrUnknownRequest and changes nothing.
func (s *ActiveSequences) Free(id string) error {
	st, ok := s.requests[id]
	if !ok {
		return fmt.Errorf("free %q: %w", id, ErrUnknownRequest)
	}
	s.remove(id, st)
	return nil
}

func (s *ActiveSequences) remove(id string, st *requestState) {
	s.prefillTokens -= st.pendingPrefill()
	if s.cfg.AssumeKVReuse {
		delta, root := s.chains.remove(st.hashes, float64(s.cfg.EffectiveStride()))
		s.sharedWeight += delta
		if root {
			s.rootChanges = append(s.rootChanges, rootChange{hash: st.hashes[0], present: false})
		}
	}
	s.exclusiveWeight -= float64(st.exclusiveBlocks()) * st.exclusiveWeight
	delete(s.requests, id)
	s.compactPrefillOrder()
	if s.chains.blocks == 0 {
		s.sharedWeight = 0 // drop accumulated float rounding
	}
	if len(s.requests) == 0 {
		s.exclusiveWeight = 0
		s.prefillTokens = 0
	}
}

// NewBlocks counts how many of a prospective request's promptBlocks
// prompt blocks are not already active on this rank: the blocks it would
// add to ActiveBlocks. hashes are its sequence hashes sampled with the
// stride. With AssumeKVReuse off nothing is shared, so every block is new.
func (s *ActiveSequences) NewBlocks(hashes []kv.SequenceHash, promptBlocks uint64) uint64 {
	return CountNewBlocks(s, hashes, promptBlocks)
}

// CountNewBlocks is NewBlocks for any uint64-shaped hash slice, so an
// actor can pass a message's []uint64 without copying it.
func CountNewBlocks[H ~uint64](s *ActiveSequences, hashes []H, promptBlocks uint64) uint64 {
	stride := uint64(s.cfg.EffectiveStride())
	promptBlocks = max(promptBlocks, uint64(len(hashes))*stride)
	if !s.cfg.AssumeKVReuse {
		return promptBlocks
	}
	// Sequence hashes are chained: hash i names the whole prefix up to
	// block i, and an active request holds every block of its prompt. So
	// the active blocks of a chain form a prefix of it, and the first
	// miss ends the count. This keeps a load query O(shared prefix)
	// instead of O(prompt) on every worker — the fan-out of one decision
	// to N workers is the router's hottest loop.
	return promptBlocks - uint64(heldPrefix(&s.chains, hashes))*stride
}

// Roots lists the rank's prompt roots: the first sampled sequence hash of
// each active request, once each. Sequence hashes are chained, so a
// prospective prompt shares active blocks with this rank (NewBlocks below
// its prompt blocks) only if its own first sampled hash is a root here. A
// scheduler that mirrors the roots asks a rank for NewBlocks only then;
// every other rank's answer is the prompt's block count. Empty when
// AssumeKVReuse is off (nothing is shared). O(roots).
func (s *ActiveSequences) Roots() []kv.SequenceHash {
	if !s.cfg.AssumeKVReuse {
		return nil
	}
	return s.chains.rootHashes()
}

// TakeRootChanges returns the roots that appeared (added) and those that
// disappeared (removed) since the previous call, net of what happened in
// between (a root added and removed again is in neither), and clears
// the journal. Applying removed, then added, to the set Roots returned
// (or this method built) at the previous call gives Roots now.
func (s *ActiveSequences) TakeRootChanges() (added, removed []kv.SequenceHash) {
	if len(s.rootChanges) == 0 {
		return nil, nil
	}
	final := make(map[kv.SequenceHash]bool, len(s.rootChanges))
	initial := make(map[kv.SequenceHash]bool, len(s.rootChanges))
	for _, c := range s.rootChanges {
		if _, seen := initial[c.hash]; !seen {
			initial[c.hash] = !c.present // the first change flips the state it found
		}
		final[c.hash] = c.present
	}
	for _, c := range s.rootChanges {
		h := c.hash
		if _, done := final[h]; !done {
			continue
		}
		switch {
		case final[h] && !initial[h]:
			added = append(added, h)
		case !final[h] && initial[h]:
			removed = append(removed, h)
		}
		delete(final, h) // report each hash once, in journal order
	}
	s.rootChanges = s.rootChanges[:0]
	return added, removed
}

// PrefillPending returns the prompt tokens of request id still counted
// as prefill load (0 once its prefill completed or when untracked) and
// when it was added; ok is false for an unknown id. The owner reads it
// before MarkPrefillCompleted to time the prefill.
func (s *ActiveSequences) PrefillPending(id string) (tokens uint64, started time.Time, ok bool) {
	st, ok := s.requests[id]
	if !ok {
		return 0, time.Time{}, false
	}
	return st.pendingPrefill(), st.startedAt, true
}

// HeadPrefill returns the oldest request (by the order requests were
// added) still waiting for its prefill: its prompt tokens to prefill and
// when it was added. ok is false when no request is in prefill. Amortised
// O(1): finished entries are dropped as they reach the front.
func (s *ActiveSequences) HeadPrefill() (tokens uint64, started time.Time, ok bool) {
	for len(s.prefillOrder) > 0 {
		e := s.prefillOrder[0]
		if st := s.requests[e.id]; st == e.state && st.pendingPrefill() > 0 {
			return st.pendingPrefill(), st.startedAt, true
		}
		s.prefillOrder[0] = prefillEntry{}
		s.prefillOrder = s.prefillOrder[1:]
	}
	s.prefillOrder = nil // let the backing array go
	return 0, time.Time{}, false
}

// compactPrefillOrder drops finished entries when they outnumber the
// requests (an old request stuck at the front would otherwise keep every
// later entry alive).
func (s *ActiveSequences) compactPrefillOrder() {
	if len(s.prefillOrder) <= 2*len(s.requests)+16 {
		return
	}
	kept := make([]prefillEntry, 0, len(s.requests))
	for _, e := range s.prefillOrder {
		if st := s.requests[e.id]; st == e.state && st.pendingPrefill() > 0 {
			kept = append(kept, e)
		}
	}
	s.prefillOrder = kept
}

// Load returns the rank's current load in O(1).
func (s *ActiveSequences) Load() Load {
	blocks := s.sharedWeight + s.exclusiveWeight
	if blocks < 0 {
		blocks = 0 // float rounding after many decays; never report negative
	}
	return Load{
		ActivePrefillTokens: s.prefillTokens,
		ActiveBlocks:        blocks,
		ActiveRequests:      len(s.requests),
	}
}
