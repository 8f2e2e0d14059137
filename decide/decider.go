// Package decide is the scheduler as pure state machines, in the shape
// of etcd-raft's RawNode: the owner feeds one what it learned
// (Step(now, input)) and carries out what it returns (effects). No
// goroutines, no clock (time comes only as now), no actors; the random
// source (tie-breaks, temperature sampling) is the Decider's own, seeded
// by its owner, so a test replays decisions exactly.
//
// Node is the whole scheduler: the scheduler actor feeds it every message
// it receives and carries out its effects. It keeps the decisions in
// flight, the requests this replica routed, the session table and the
// trust notes, and steps a Decider for each decision.
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
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sessions"
	"github.com/kvrouter/kvrouter/tracking"
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
	// MaxQueueWait bounds a request's wait in the queue (0: unbounded).
	MaxQueueWait time.Duration
	// Pipeline composes the stages; the zero value is DefaultPipeline.
	Pipeline Pipeline
	// Models are the served models' own pipelines (a policy file's
	// models): a request naming one (RouteRequest.model) runs it; any
	// other runs Pipeline. Nil: every request runs Pipeline.
	Models map[string]Pipeline
}

// Decider makes routing decisions. It is not safe for concurrent use: one
// owner (the scheduler actor) steps it.
type Decider struct {
	cfg        Config
	base       scheduling.Config // cfg.Scheduling normalised
	rng        *rand.Rand
	pipe       Pipeline
	costs      []float64              // scoring scratch
	cands      []scheduling.Candidate // Join's scratch
	targets    []kv.WorkerWithDpRank  // LoadTargets' scratch
	seqScratch []kv.SequenceHash      // Hash's whole sequence-hash chain
	// models are the served models' pipelines (Config.Models, each
	// completed from pipe).
	models map[string]*Pipeline
	// A step's effects live in the Decider until the next step (a
	// decision allocates none of them).
	out     []Effect
	answer  Answer
	adds    [2]RecordAdd
	nadds   int
	session Session
	parked  Queue
	ask     Ask
	ctx     Context
	// board is every rank's published load and the decisions recorded
	// that the loads may not show yet.
	board *Board
	queue *scheduling.Queue[uint64] // payload: the owner's request id
	// rechecking: the queued request recheckID is being re-checked.
	rechecking bool
	recheckID  uint64
	// adapters remembers which ranks served which LoRA adapter
	// (the lora-affinity scorer reads it).
	adapters Adapters
}

// New returns a Decider whose random source is seeded with seed. A queue
// policy or length the scheduling config does not allow is an error.
func New(cfg Config, seed [2]uint64) (*Decider, error) {
	p := cfg.Pipeline
	if p.empty() {
		p = DefaultPipeline()
	}
	q, err := scheduling.NewQueue[uint64](cfg.Scheduling.RouterQueuePolicy, cfg.Scheduling.MaxQueueLength)
	if err != nil {
		return nil, fmt.Errorf("decider: %w", err)
	}
	var models map[string]*Pipeline
	for name, mp := range cfg.Models {
		if models == nil {
			models = make(map[string]*Pipeline, len(cfg.Models))
		}
		if mp.empty() {
			mp = p
		}
		models[name] = &mp
	}
	return &Decider{cfg: cfg, base: cfg.Scheduling.Normalized(), rng: rand.New(rand.NewPCG(seed[0], seed[1])), pipe: p,
		models: models, board: NewBoard(), queue: q}, nil
}

// pipeline is the pipeline of a request for model: the model's own, else
// the default.
func (d *Decider) pipeline(model string) *Pipeline {
	if p, ok := d.models[model]; ok {
		return p
	}
	return &d.pipe
}

// Board is the ranks' published loads the Decider reads; its owner
// applies publications and rank tables to it and reads it to gather a
// decision's loads.
func (d *Decider) Board() *Board { return d.board }

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

// Input is what a Step takes: *Start or *Decide.
type Input interface{ input() }

// Effect is what a Step asks its owner to do. A Decider's are *Ask,
// *Answer, *Queue, *RecordAdd or *Session; a Node's are listed in
// node_effects.go. They belong to the stepped machine and are valid until
// its next Step.
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
	// Tracked holds the request ids active here, Active how many there
	// are (duplicate ids and the admission limit); nil: none.
	Tracked Tracked
	Active  int
	// Recheck: a queued request's constraints are re-read against the
	// current ranks (no validation, no session planning).
	Recheck bool
	// Plan is filled in place when set (the owner keeps it with its
	// fan-out; a recheck updates it); nil: a new one.
	Plan *Plan
}

// Tracked is the table of the requests this replica routed
// (tracking.Table).
type Tracked interface {
	Lookup(id string) (tracking.Entry, bool)
	// ClientActive is how many of them a client holds.
	ClientActive(client string) int
}

// Plan is a started decision's state between its steps (its owner keeps
// it with the fan-out and hands it back).
type Plan struct {
	Eligible []kv.WorkerWithDpRank
	// Config is the scheduling config with the request's override (the
	// Decider's own normalised config when there is none: read only).
	Config *scheduling.Config
	// Sticky session: whether it had a binding when the decision started,
	// the bound rank while it is still fit, and why it moves otherwise.
	SessionBound bool
	HasSticky    bool
	Sticky       kv.WorkerWithDpRank
	MoveReason   sessions.MoveReason
	SessionAge   time.Duration
	// BestCached is the best cache hit seen over the attempts (wspt).
	BestCached uint64
	// Queued: the request waits in the Decider's queue.
	Queued bool
}

// Ask: fan out to Plan.Eligible (overlaps, loads), then Decide.
type Ask struct{ Plan *Plan }

// Decide makes the decision once the replies are in (or timed out).
type Decide struct {
	// ID is the owner's id for the request (the queue's payload).
	ID    uint64
	Req   *messages.RouteRequest
	Plan  *Plan
	Ranks *Ranks
	// Candidates joins overlaps and loads for Plan.Eligible (the owner's
	// scratch: the Decider may modify it in place).
	Candidates []scheduling.Candidate
	// Loads are the replies of the ranks asked for their load (every
	// other candidate's is its publication on the Board).
	Loads map[kv.WorkerWithDpRank]*messages.LoadReply
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
	// Close: the scored runner-up's cost was within noise of the best
	// (CloseMargin), so the decision could have gone either way.
	Close bool
	// Set by a Node: To is the route call's Caller, Req its request,
	// Blocks the prompt's full blocks (0 before it was hashed), Started
	// when the decision started.
	To      any
	Req     *messages.RouteRequest
	Blocks  int
	Started time.Time
}

// Queue: the request waits (every eligible rank is overloaded); Parked
// when it was queued just now, false when a re-check leaves it in place.
type Queue struct {
	BestCached uint64
	Parked     bool
}

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

func (*Start) input()  {}
func (*Decide) input() {}

func (*Ask) effect()       {}
func (*Answer) effect()    {}
func (*Queue) effect()     {}
func (*RecordAdd) effect() {}
func (*Session) effect()   {}

func (d *Decider) emitAnswer(a Answer) []Effect {
	d.answer = a
	d.out = append(d.out, &d.answer)
	return d.out
}

func (d *Decider) emitAdd(r RecordAdd) {
	d.adds[d.nadds] = r
	d.out = append(d.out, &d.adds[d.nadds])
	d.nadds++
}

func (d *Decider) emitSession(s Session) {
	d.session = s
	d.out = append(d.out, &d.session)
}

func (d *Decider) emitQueue(q Queue) []Effect {
	d.parked = q
	d.out = append(d.out, &d.parked)
	return d.out
}

func (d *Decider) emitAsk(p *Plan) []Effect {
	d.ask = Ask{Plan: p}
	d.out = append(d.out, &d.ask)
	return d.out
}

// Step advances a decision with one input and returns its effects, in
// the order they must be carried out. Start returns exactly one: Ask or
// Answer.
func (d *Decider) Step(now time.Time, in Input) []Effect {
	d.out, d.nadds = d.out[:0], 0
	switch m := in.(type) {
	case *Start:
		return d.start(now, m)
	case *Decide:
		return d.decide(now, m)
	}
	return nil
}

func (d *Decider) refuse(outcome string, code messages.RouteErrorCode, format string, args ...any) []Effect {
	return d.emitAnswer(Answer{Err: RouteErr(code, format, args...), Outcome: outcome})
}

// start validates a request and applies its constraints.
func (d *Decider) start(now time.Time, s *Start) []Effect {
	m := s.Req
	if s.Recheck {
		eligible, rerr := d.eligible(s.Ranks, m)
		if rerr != nil {
			return d.emitAnswer(Answer{Err: rerr, Outcome: "no_worker"})
		}
		s.Plan.Eligible = eligible
		return d.emitAsk(s.Plan)
	}
	bad := messages.RouteErrorCode_ROUTE_ERROR_BAD_REQUEST
	if err := CheckTokens(m.TokenIds); err != nil {
		return d.refuse("bad_request", bad, "%v", err)
	}
	if err := d.cfg.Limits.CheckRequest(len(m.TokenIds), m.RequestId); err != nil {
		return d.refuse("bad_request", bad, "%v", err)
	}
	if m.UpdateStates {
		if strings.HasSuffix(m.RequestId, scheduling.PrefillRequestSuffix) {
			return d.refuse("bad_request", bad, "request_id %q ends in %q, the suffix of disaggregated prefill hops",
				m.RequestId, scheduling.PrefillRequestSuffix)
		}
		if _, dup := lookup(s.Tracked, m.RequestId); dup {
			return d.refuse("bad_request", bad, "request_id %q is already active; free it first or use a new id", m.RequestId)
		}
		if err := d.cfg.Limits.CheckAdmission(s.Active); err != nil {
			return d.refuse("overloaded", messages.RouteErrorCode_ROUTE_ERROR_LIMIT, "%v", err)
		}
		if s.Tracked != nil {
			if err := d.cfg.Limits.CheckClient(m.Client, s.Tracked.ClientActive(m.Client)); err != nil {
				return d.refuse("client_limit", messages.RouteErrorCode_ROUTE_ERROR_CLIENT_LIMIT, "%v", err)
			}
		}
	}
	if m.SessionId != "" && s.Session.IDError != nil {
		return d.refuse("bad_request", bad, "session_id: %v", s.Session.IDError)
	}
	eligible, rerr := d.eligible(s.Ranks, m)
	if rerr != nil {
		return d.emitAnswer(Answer{Err: rerr, Outcome: "no_worker"})
	}
	p := s.Plan
	if p == nil {
		p = &Plan{}
	}
	*p = Plan{Eligible: eligible, Config: &d.base}
	if m.RouterConfigOverride != nil {
		cfg := d.cfg.Scheduling.WithOverride(OverrideOf(m.RouterConfigOverride))
		p.Config = &cfg
	}
	if m.SessionId != "" && s.Session.Bound {
		planSession(p, s.Ranks, s.Session, now)
	}
	return d.emitAsk(p)
}

func lookup(t Tracked, id string) (tracking.Entry, bool) {
	if t == nil {
		return tracking.Entry{}, false
	}
	return t.Lookup(id)
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
