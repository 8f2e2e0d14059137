// Package decide is the routing decision as one pure state machine, in
// the shape of etcd-raft's RawNode: the scheduler actor feeds it what it
// learned (Step(now, input)) and carries out what it returns (effects).
// No goroutines, no clock (time comes only as now), no actors; the
// random source (tie-breaks, temperature sampling) is the Decider's own,
// seeded by its owner, so a test replays decisions exactly.
//
// A decision runs one ordered pipeline over two steps:
//
//	Start:  validate → constraints (pins, allowed workers, rank states,
//	        the session's binding)                → Ask (fan out) | Answer (refused)
//	Decide: candidates (+ decisions the loads do not show yet)
//	        → admit or queue (Admitter)                 → Queue
//	        → filter (Filters: session affinity)
//	        → score (weighted Scorers) → pick (Picker)
//	        → record                                    → RecordAdd…, Session, Answer
//
// Admission comes before the filters: a request waits only when every
// eligible rank is overloaded, whatever its session prefers. In a fleet
// with prefill and decode pools the score-and-pick stage is the built-in
// two-phase selection (scheduling.SelectDisaggregatedBound).
package decide

import (
	"math/rand/v2"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sessions"
)

// Config is what a Decider reads besides its inputs.
type Config struct {
	Scheduling scheduling.Config
	Limits     scheduling.Limits
	BlockSize  int
	// Stride is the effective active-sequence stride (blocks per sampled
	// sequence hash).
	Stride int
	// TrackActiveBlocks off zeroes every candidate's decode blocks (the
	// cost then sees no decode load).
	TrackActiveBlocks bool
	// Pipeline composes the stages; the zero value is DefaultPipeline.
	Pipeline Pipeline
}

// Decider makes routing decisions. It is not safe for concurrent use: one
// owner (the scheduler actor) steps it.
type Decider struct {
	cfg   Config
	rng   *rand.Rand
	pipe  Pipeline
	costs []float64 // scoring scratch
	// adapters remembers which ranks served which LoRA adapter
	// (the lora-affinity scorer reads it).
	adapters Adapters
}

// New returns a Decider whose random source is seeded with seed.
func New(cfg Config, seed [2]uint64) *Decider {
	p := cfg.Pipeline
	if p.empty() {
		p = DefaultPipeline()
	}
	return &Decider{cfg: cfg, rng: rand.New(rand.NewPCG(seed[0], seed[1])), pipe: p}
}

// Rand is the Decider's random source, for the one draw made outside a
// step: the sequence hashes of a request routed with assume_kv_reuse off
// (each block unique) come from the same stream as the decisions, so a
// seeded run repeats.
func (d *Decider) Rand() *rand.Rand { return d.rng }

// Ranks are the registered worker ranks as a decision reads them.
type Ranks struct {
	List    []kv.WorkerWithDpRank // sorted: the stable candidate order
	Budgets map[kv.WorkerID]uint64
	// States holds the ranks that are not active (nil when all are).
	States map[kv.WorkerWithDpRank]kv.WorkerState
	// Capacity is each rank's KV cache in blocks (absent: unknown).
	Capacity map[kv.WorkerWithDpRank]uint64
	// Roles holds the ranks that are not RoleBoth (nil: aggregated fleet).
	Roles map[kv.WorkerWithDpRank]kv.Role
	// Has reports whether a rank is registered.
	Has func(kv.WorkerWithDpRank) bool
}

// Disaggregated reports whether the fleet has prefill and decode pools.
func (r *Ranks) Disaggregated() bool { return r.Roles != nil }

// Role is a rank's role (both when unlisted).
func (r *Ranks) Role(w kv.WorkerWithDpRank) kv.Role { return r.Roles[w] }

func (r *Ranks) stateFunc() func(kv.WorkerWithDpRank) kv.WorkerState {
	if r.States == nil {
		return nil
	}
	return func(w kv.WorkerWithDpRank) kv.WorkerState { return r.States[w] }
}

// Input is what a Step takes: Start or Decide.
type Input interface{ input() }

// Effect is what a Step asks its owner to do: Ask, Answer, Queue,
// RecordAdd or Session.
type Effect interface{ effect() }

// SessionAnswer is the session table's answer for a request's session
// when its decision starts.
type SessionAnswer struct {
	Bound    bool
	Worker   kv.WorkerWithDpRank
	LastUsed int64 // Unix nanoseconds
	// IDError is the table's verdict on the id (nil: acceptable).
	IDError error
}

// Start begins a route decision: validation and constraints.
type Start struct {
	Req   *messages.RouteRequest
	Ranks *Ranks
	// Session is the table's answer for Req.SessionId (ignored without one).
	Session SessionAnswer
	// Tracked reports whether a request id is active here, Active how
	// many are (duplicate ids and the admission limit).
	Tracked func(id string) bool
	Active  int
	// Recheck: a queued request's constraints are re-read against the
	// current ranks (no validation, no session planning).
	Recheck bool
	// Plan of a recheck, updated in place.
	Plan *Plan
}

// Plan is a started decision's state between its steps (its owner keeps
// it with the fan-out and hands it back).
type Plan struct {
	Eligible []kv.WorkerWithDpRank
	// Config is the scheduling config with the request's override.
	Config scheduling.Config
	// Sticky session: whether it had a binding when the decision started,
	// the bound rank while it is still fit, and why it moves otherwise.
	SessionBound bool
	HasSticky    bool
	Sticky       kv.WorkerWithDpRank
	MoveReason   sessions.MoveReason
	SessionAge   time.Duration
	// BestCached is the best cache hit seen over the attempts (wspt).
	BestCached uint64
}

// Ask: fan out to Plan.Eligible (overlaps, loads), then Decide.
type Ask struct{ Plan *Plan }

// Decide makes the decision once the replies are in (or timed out).
type Decide struct {
	Req   *messages.RouteRequest
	Plan  *Plan
	Ranks *Ranks
	// Candidates joins overlaps and loads for Plan.Eligible (the owner's
	// scratch: the Decider may modify it in place).
	Candidates []scheduling.Candidate
	// Unseen are recorded decisions the candidates' loads do not include.
	Unseen []scheduling.Routed
	// Sampled are the prompt's sampled sequence hashes, Blocks its full
	// blocks.
	Sampled []uint64
	Blocks  int
	// Shared is the prompt's shared-tier prefix.
	Shared uint32
	// Overlaps tells which ranks' device overlap was predicted.
	Overlaps Overlaps
	// Explain asks for a Receipt on the Answer; Signals gives the ages
	// the receipt reports (nil: unknown).
	Explain bool
	Signals Signals
}

// Overlaps answers whether a rank's device overlap is this replica's
// routing prediction, and its engine-confirmed part.
type Overlaps interface {
	Predicted(w kv.WorkerWithDpRank) (confirmed uint32, predicted bool)
}

// Signals gives, for a receipt, where each candidate's load came from
// ("reply", "published", "none") and when it was taken (Unix ns, 0:
// unknown), and when the overlap replies arrived.
type Signals interface {
	Load(w kv.WorkerWithDpRank) (source string, atUnixNano int64)
	OverlapAt() int64
}

// Answer replies to the route call: Reply or Err.
type Answer struct {
	Reply *messages.RouteReply
	Err   *messages.RouteError
	// Outcome is the decision metric's label (routed, query, queued,
	// overloaded, no_worker, bad_request); OverlapBlocks its overlap.
	Outcome       string
	OverlapBlocks uint32
	// SharedCache, when set, is the prompt's shared prefix and the part
	// of it beyond the prefilling rank's device prefix.
	SharedCache *[2]uint32
	// Disaggregation is the path of a disaggregated decision ("" if none).
	Disaggregation string
	Receipt        *Receipt
}

// Queue parks the request: every eligible rank is overloaded.
type Queue struct{ BestCached uint64 }

// RecordAdd records one tracked request (a hop) on a rank: the owner
// sends the rank the add, tracks and gossips it.
type RecordAdd struct {
	ID             string
	Worker         kv.WorkerWithDpRank
	PrefillTokens  uint64 // uncached prompt tokens
	TrackPrefill   bool   // they count as prefill load
	ExpectedOutput uint64
	Token          uint64 // cancel token
	// NewBlocks are its prompt blocks not already active on the rank;
	// OverlapBlocks its device prefix there.
	NewBlocks     uint64
	OverlapBlocks uint32
	Isl           uint64
}

// Session binds, keeps or moves a routed request's session.
type Session struct {
	ID     string
	Worker kv.WorkerWithDpRank
	// WasBound: the session had a binding when the decision started.
	WasBound   bool
	MoveReason sessions.MoveReason
}

func (Start) input()  {}
func (Decide) input() {}

func (Ask) effect()       {}
func (Answer) effect()    {}
func (Queue) effect()     {}
func (RecordAdd) effect() {}
func (Session) effect()   {}

// Step advances a decision with one input and returns its effects, in
// the order they must be carried out.
func (d *Decider) Step(now time.Time, in Input) []Effect {
	switch m := in.(type) {
	case Start:
		return d.start(now, m)
	case Decide:
		return d.decide(now, m)
	}
	return nil
}

func refuse(outcome string, code messages.RouteErrorCode, format string, args ...any) []Effect {
	return []Effect{Answer{Err: RouteErr(code, format, args...), Outcome: outcome}}
}

// start validates a request and applies its constraints.
func (d *Decider) start(now time.Time, s Start) []Effect {
	m := s.Req
	if s.Recheck {
		eligible, rerr := d.eligible(s.Ranks, m)
		if rerr != nil {
			return []Effect{Answer{Err: rerr, Outcome: "no_worker"}}
		}
		s.Plan.Eligible = eligible
		return []Effect{Ask{Plan: s.Plan}}
	}
	bad := messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST
	if err := CheckTokens(m.TokenIds); err != nil {
		return refuse("bad_request", bad, "%v", err)
	}
	if err := d.cfg.Limits.CheckRequest(len(m.TokenIds), m.RequestId); err != nil {
		return refuse("bad_request", bad, "%v", err)
	}
	if m.UpdateStates {
		if strings.HasSuffix(m.RequestId, scheduling.PrefillRequestSuffix) {
			return refuse("bad_request", bad, "request_id %q ends in %q, the suffix of disaggregated prefill hops",
				m.RequestId, scheduling.PrefillRequestSuffix)
		}
		if s.Tracked != nil && s.Tracked(m.RequestId) {
			return refuse("bad_request", bad, "request_id %q is already active; free it first or use a new id", m.RequestId)
		}
		if err := d.cfg.Limits.CheckAdmission(s.Active); err != nil {
			return refuse("overloaded", messages.RouteErrorCode_ROUTE_ERROR_LIMIT, "%v", err)
		}
	}
	if m.SessionId != "" && s.Session.IDError != nil {
		return refuse("bad_request", bad, "session_id: %v", s.Session.IDError)
	}
	eligible, rerr := d.eligible(s.Ranks, m)
	if rerr != nil {
		return []Effect{Answer{Err: rerr, Outcome: "no_worker"}}
	}
	p := &Plan{Eligible: eligible, Config: d.cfg.Scheduling.WithOverride(OverrideOf(m.RouterConfigOverride))}
	if m.SessionId != "" && s.Session.Bound {
		planSession(p, s.Ranks, s.Session, now)
	}
	return []Effect{Ask{Plan: p}}
}

// eligible applies the pinned-worker and allowed-workers constraints and
// the ranks' states (scheduling.EligibleRanks) to the registered ranks.
func (d *Decider) eligible(r *Ranks, m *messages.RouteRequest) ([]kv.WorkerWithDpRank, *messages.RouteError) {
	c := scheduling.Constraints{State: r.stateFunc()}
	if m.PinnedWorker != nil {
		w := RankOf(m.PinnedWorker)
		c.Pinned = &w
	}
	for _, id := range m.AllowedWorkerIds {
		c.AllowedWorkerIDs = append(c.AllowedWorkerIDs, kv.WorkerID(id))
	}
	out, err := scheduling.EligibleRanks(r.List, c)
	if err != nil {
		return nil, RouteErr(messages.RouteErrorCode_ROUTE_ERROR_NO_ELIGIBLE_WORKER, "%v", err)
	}
	// Unconstrained, out is the ranks' own slice: the next rank table
	// replaces it but nothing mutates it.
	return out, nil
}
