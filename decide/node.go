package decide

import (
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/sessions"
	"github.com/kvrouter/kvrouter/tracking"
	"github.com/kvrouter/kvrouter/trust"
)

// Node is the scheduler's whole state as one pure machine: the Decider
// and the tables around its decisions. The scheduler actor feeds it every
// message it receives (Step(now, input)) and carries out the effects: it
// sends what they name to the shards, the ranks' sequence actors, the
// callers, the replication edge, the trust actor and the gossip, and
// reports the metrics. Like the Decider it has no goroutines and no clock,
// and names ranks by kv.WorkerWithDpRank and callers by an opaque value
// its owner chose (Route.Caller): it never sees an actor.
//
// Its tables:
//   - the decisions in flight: a fan-out's replies gathered so far,
//     matched by query id, with their deadline, and the route calls'
//     cancel tokens;
//   - the requests this replica routed (tracking.Table), through their
//     lifecycle: prefill completed, output blocks, lease renewals and
//     frees from a client (here or, for a free, through a peer), a
//     client that left, and the ranks' stale expiries;
//   - the sticky-session table (sessions.Table) and its expiry;
//   - which ranks' indexes are not exact (the trust actor's verdicts):
//     a decision records its blocks as cached there (approximate-mode
//     prediction), and a rank sent work that stores blocks owes KV
//     events.
type Node struct {
	cfg   NodeConfig
	dec   *Decider
	ranks *Ranks
	local *tracking.Table
	sess  *sessions.Table
	// sessStats are the session table's counters last reported.
	sessStats sessions.Stats

	pending map[uint64]*pending
	// cancels maps a route call's cancel token to its pending decision.
	cancels map[uint64]uint64
	nextID  uint64
	// localFree are block-hash slices of finished decisions, reused by
	// the next ones (recycleLocal).
	localFree [][]kv.LocalBlockHash

	// notExact are the ranks whose index is not exact (trust);
	// trustNoted when each rank was last reported owing events.
	notExact   map[kv.WorkerWithDpRank]trust.State
	trustNoted map[kv.WorkerWithDpRank]int64
	// refusals paces the reports of clients refused at their own bound.
	refusals loglimit.Keyed[string]
	// routed are the decisions of the calls tracked here, for their
	// retries (retry.go); digestBuf is promptDigest's scratch.
	routed    map[string]routedCall
	digestBuf []byte

	// The Decider's inputs, reused step after step.
	startIn  Start
	decideIn Decide
	fx       effects
}

// NodeConfig is what a Node reads besides its inputs.
type NodeConfig struct {
	Decider Config
	// Seed seeds the Decider's random source.
	Seed     [2]uint64
	Sessions sessions.Config
	// Replica is this replica's id (the origin of its requests).
	Replica string
	// Shards is how many index shards a fan-out asks.
	Shards int
	// DecisionTimeout bounds how long a decision waits for its replies.
	DecisionTimeout time.Duration
	// KVEvents: the index learns from the engines' KV events (false:
	// approximate mode, every decision is recorded as cached on its
	// rank). PredictedTTL > 0 records predictions in event mode too.
	KVEvents     bool
	PredictedTTL time.Duration
	// Trust: an index-trust tracker listens for Routed effects.
	Trust bool
}

// TrustNoteEvery spaces the Routed effects per rank: the staleness rule
// counts seconds, so a report per decision would only cost messages.
const TrustNoteEvery = 250 * time.Millisecond

// NewNode returns a Node with no ranks. A config Validate would refuse is
// an error.
func NewNode(cfg NodeConfig) (*Node, error) {
	dec, err := New(cfg.Decider, cfg.Seed)
	if err != nil {
		return nil, err
	}
	st, err := sessions.New(cfg.Sessions)
	if err != nil {
		return nil, fmt.Errorf("decider: %w", err)
	}
	none := &Ranks{Budgets: map[kv.WorkerID]uint64{}, Has: func(kv.WorkerWithDpRank) bool { return false }}
	return &Node{cfg: cfg, dec: dec, ranks: none, local: tracking.New(), sess: st,
		pending: map[uint64]*pending{}, cancels: map[uint64]uint64{}, refusals: loglimit.Keyed[string]{Every: time.Minute}}, nil
}

// Decider is the Node's Decider (its board and queue).
func (n *Node) Decider() *Decider { return n.dec }

// Waiting reports whether anything has a deadline: a decision in flight
// or a request queued (the owner's ticker may sleep otherwise).
func (n *Node) Waiting() bool { return len(n.pending) > 0 || n.dec.QueueLen() > 0 }

// ---- inputs ----

// Route is a route call: Caller is the owner's handle to answer it with
// (an Answer's To), Explain asks for a route receipt.
type Route struct {
	Req     *messages.RouteRequest
	Caller  any
	Explain bool
}

// Query is an introspection call: an OverlapScoresQuery,
// PotentialLoadsQuery or ActiveRequestsQuery. Seq is the owner's last
// gossip sequence number (an ActiveRequestsQuery's answer carries it).
type Query struct {
	Msg    any
	Caller any
	Seq    uint64
}

// Replies to a fan-out, matched by query id.
type (
	Overlap  struct{ M *messages.OverlapReply }
	Load     struct{ M *messages.LoadReply }
	Requests struct{ M *messages.ActiveRequestsReply }
)

// RankLoad is a rank's load publication.
type RankLoad struct{ M *messages.RankLoad }

// Lifecycle is a client's step of a request (answered with a Respond, or
// handed to the replication edge when this replica did not route it).
type Lifecycle struct{ M *messages.RequestLifecycle }

// Cancel: a route call's client left.
type Cancel struct{ M *messages.CancelRoute }

// PeerStep is a peer's step of a request the replication edge does not
// hold (perhaps one this replica routed).
type PeerStep struct{ M *messages.SequenceEvent }

// StaleFreed: the ranks expired these requests (their leases ran out).
type StaleFreed struct{ IDs []string }

// TrustTable is the trust verdicts: the ranks that are not exact.
type TrustTable struct {
	NotExact map[kv.WorkerWithDpRank]trust.State
}

// RankTable is the registry's new rank set; Incarnation names each rank's
// sequence actor (a restarted one must be asked for its full load).
type RankTable struct {
	Ranks       *Ranks
	Incarnation func(kv.WorkerWithDpRank) (string, bool)
}

// Tick: time passed (deadlines, queue waits, idle sessions).
type Tick struct{}

// TrackedQuery asks how the routed requests spread over clients.
type TrackedQuery struct{}

// Session inputs: peers' writes, and the session API's calls.
type (
	SessionUpdates       struct{ Events []*messages.SequenceEvent }
	EndSession           struct{ M *messages.EndSession }
	SessionQuery         struct{ M *messages.SessionQuery }
	SessionDigestQuery   struct{}
	SessionSnapshotQuery struct{}
)

func (*Route) input()               {}
func (*Query) input()               {}
func (Overlap) input()              {}
func (Load) input()                 {}
func (Requests) input()             {}
func (RankLoad) input()             {}
func (Lifecycle) input()            {}
func (Cancel) input()               {}
func (PeerStep) input()             {}
func (*StaleFreed) input()          {}
func (TrustTable) input()           {}
func (*RankTable) input()           {}
func (Tick) input()                 {}
func (TrackedQuery) input()         {}
func (*SessionUpdates) input()      {}
func (EndSession) input()           {}
func (SessionQuery) input()         {}
func (SessionDigestQuery) input()   {}
func (SessionSnapshotQuery) input() {}

// Step applies one input and returns the effects, in the order they must
// be carried out. They belong to the Node and are valid until its next
// Step.
func (n *Node) Step(now time.Time, in Input) []Effect {
	n.fx.reset()
	switch m := in.(type) {
	case *Route:
		n.route(now, m)
	case *Query:
		n.query(now, m)
	case Overlap:
		if p, ok := n.pending[m.M.QueryId]; ok && p.fan.OnOverlap(m.M) {
			n.maybeFinish(now, p)
		}
	case Load:
		if p, ok := n.pending[m.M.QueryId]; ok && p.fan.OnLoad(m.M) {
			n.maybeFinish(now, p)
		}
	case Requests:
		if p, ok := n.pending[m.M.QueryId]; ok && p.fan.OnRankReply() {
			p.requests = append(p.requests, m.M.Events...)
			n.maybeFinish(now, p)
		}
	case RankLoad:
		n.notePeerStart(now, m.M) // before the board takes the new load
		n.dec.board.Apply(m.M, now.UnixNano())
		if n.dec.QueueLen() > 0 {
			n.tryDequeue(now) // a free shows in the load only now
		}
	case Lifecycle:
		n.lifecycle(now, m.M)
	case Cancel:
		n.cancel(now, m.M)
	case PeerStep:
		n.peerStep(now, m.M)
	case *StaleFreed:
		for _, id := range m.IDs {
			if _, ok := n.local.Untrack(id); ok {
				// Peers must see our own expiries, or their view of us
				// keeps disagreeing with our digest.
				n.gossip(&messages.SequenceEvent{Data: &messages.SequenceEvent_Free{Free: &messages.FreeRequest{RequestId: id}}})
			}
		}
	case TrustTable:
		n.notExact = m.NotExact
	case *RankTable:
		n.ranks = m.Ranks
		n.dec.board.Sync(m.Ranks.List, m.Incarnation, func(w kv.WorkerWithDpRank) { n.toRank(w, &messages.RankLoadQuery{}, false) })
		n.local.DropUnregistered(m.Ranks.Has)
		n.tryDequeue(now)
	case Tick:
		n.tick(now)
	case TrackedQuery:
		top, c := n.local.TopClient()
		n.respond(&messages.TrackedReply{TrackedRequests: uint64(n.local.Len()), QueueDepth: uint32(n.dec.QueueLen()),
			Clients: uint32(n.local.Clients()), TopClient: top, TopClientRequests: uint64(c)})
	case *SessionUpdates:
		n.applySessions(now, m.Events)
	case EndSession:
		n.endSession(now, m.M.SessionId)
	case SessionQuery:
		n.querySession(now, m.M.SessionId)
	case SessionDigestQuery:
		d := n.sess.Digest()
		n.respond(&messages.SessionDigestReply{Count: uint64(d.Count), Hash: d.Hash})
	case SessionSnapshotQuery:
		entries := n.sess.Snapshot(now)
		out := &messages.SessionTable{Entries: make([]*messages.SequenceEvent, len(entries))}
		for i, e := range entries {
			out.Entries[i] = SessionEvent(e)
		}
		n.respond(out)
	}
	return n.fx.out
}

// tick runs the decision path's housekeeping: decision timeouts, queue
// waits and re-checks, idle sessions.
func (n *Node) tick(now time.Time) {
	for _, p := range n.pending {
		n.timeout(now, p)
	}
	for _, id := range n.dec.Expire(now) {
		if p, ok := n.pending[id]; ok {
			rerr := n.dec.WaitedTooLong(&p.plan)
			n.release(p)
			n.answer(p, &Answer{Err: rerr, Outcome: "overloaded"})
		}
	}
	n.tryDequeue(now)
	n.sess.Expire(now)
	n.reportSessions()
	n.gauge(GaugeQueueDepth, n.dec.QueueLen())
}
