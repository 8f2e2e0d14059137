package decide

import (
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// The Node's effects, besides the Decider's *Answer (which the Node
// completes with its caller: To, Req, Blocks, Started).

// AskShards: send Query to every shard (their OverlapReplies come back
// as Overlap inputs).
type AskShards struct{ Query *messages.ScoreRequest }

// ToRank: send Msg to the rank's sequence actor; Ask: as a request whose
// reply comes back as an input.
type ToRank struct {
	Rank kv.WorkerWithDpRank
	Msg  any
	Ask  bool
}

// Predict: send Msg to the shard that indexes Rank (the routed blocks
// count as cached there until the engine's events say otherwise).
type Predict struct {
	Rank kv.WorkerWithDpRank
	Msg  *messages.RoutingDecision
}

// Gossip: publish Event to the peers.
type Gossip struct{ Event *messages.SequenceEvent }

// Reply: send Msg to the caller of an earlier step (To is its Caller).
type Reply struct {
	To  any
	Msg any
}

// Respond: answer the message being stepped with Msg.
type Respond struct{ Msg any }

// ToReplication: hand the message being stepped to the replication
// edge (a lifecycle step of a request a peer routed).
type ToReplication struct{}

// TakeOver: this replica routed ID (perhaps again, after the replica
// that routed it first died): the replication edge releases a peer's
// record of it, so the request is counted once.
type TakeOver struct{ ID string }

// Routed: Rank was sent work at At (Unix ns) that makes its engine store
// blocks, so it owes KV events (the trust tracker's staleness rule).
type Routed struct {
	Rank kv.WorkerWithDpRank
	At   int64
}

// Phase: a decision phase ("hash", "score", "select") ended; it ran since
// Since.
type Phase struct {
	Name  string
	Since time.Time
}

// Degraded: a decision was made without Missing replies (Reason:
// "shard_timeout", "load_timeout").
type Degraded struct {
	Reason  string
	Missing int
	After   time.Duration
}

// Count adds N to a counter, labelled Label.
type Count struct {
	Metric CountMetric
	Label  string
	N      int
}

// CountMetric names a counter.
type CountMetric uint8

const (
	// CountDecision: a decision outcome no Answer reports ("queued", or
	// "cancelled" for a recorded request); N is the prompt's blocks.
	CountDecision CountMetric = iota
	// CountAdmission: a route refused by an admission bound (Label:
	// "active_requests", "client_active_requests").
	CountAdmission
	// CountSession: sticky-session table changes ("bound", "ended",
	// "evicted", "expired", "rejected").
	CountSession
	// CountSessionMoved: a session moved off its rank (Label: why).
	CountSessionMoved
)

// Gauge sets a gauge to N.
type Gauge struct {
	Metric GaugeMetric
	N      int
}

// GaugeMetric names a gauge.
type GaugeMetric uint8

const (
	GaugeQueueDepth GaugeMetric = iota
	GaugeSessions
)

// ClientRefused: a client at its own active-request bound was refused
// (reported at most once a minute per client; Suppressed since the last).
type ClientRefused struct {
	Client                string
	Active, ReplicaActive int
	Suppressed            int
}

// SessionRejected: a peer's session write was dropped (Err: why).
type SessionRejected struct {
	Origin string
	Err    error
}

func (*AskShards) effect()       {}
func (*ToRank) effect()          {}
func (*Predict) effect()         {}
func (*Gossip) effect()          {}
func (*Reply) effect()           {}
func (*Respond) effect()         {}
func (*ToReplication) effect()   {}
func (*Routed) effect()          {}
func (*TakeOver) effect()        {}
func (*Phase) effect()           {}
func (*Degraded) effect()        {}
func (*Count) effect()           {}
func (*Gauge) effect()           {}
func (*ClientRefused) effect()   {}
func (*SessionRejected) effect() {}

// pool keeps one effect type's values for a step; they are reused by the
// next step (a decision allocates none).
type pool[T any] struct{ s []T }

func (p *pool[T]) reset() { clear(p.s); p.s = p.s[:0] }

// put appends v to p and its pointer to out.
func put[T any, P interface {
	*T
	Effect
}](out *[]Effect, p *pool[T], v T) {
	p.s = append(p.s, v)
	*out = append(*out, P(&p.s[len(p.s)-1]))
}

type effects struct {
	out       []Effect
	answers   pool[Answer]
	asks      pool[AskShards]
	ranks     pool[ToRank]
	predicts  pool[Predict]
	gossips   pool[Gossip]
	replies   pool[Reply]
	responds  pool[Respond]
	routed    pool[Routed]
	takeOvers pool[TakeOver]
	phases    pool[Phase]
	degraded  pool[Degraded]
	counts    pool[Count]
	gauges    pool[Gauge]
	refusals  pool[ClientRefused]
	rejected  pool[SessionRejected]
	forwarded ToReplication
}

func (f *effects) reset() {
	if len(f.out) == 0 {
		return // every pool is empty too (put appends to both)
	}
	clear(f.out)
	f.out = f.out[:0]
	f.answers.reset()
	f.asks.reset()
	f.ranks.reset()
	f.predicts.reset()
	f.gossips.reset()
	f.replies.reset()
	f.responds.reset()
	f.routed.reset()
	f.takeOvers.reset()
	f.phases.reset()
	f.degraded.reset()
	f.counts.reset()
	f.gauges.reset()
	f.refusals.reset()
	f.rejected.reset()
}

func (n *Node) toRank(w kv.WorkerWithDpRank, msg any, ask bool) {
	put(&n.fx.out, &n.fx.ranks, ToRank{Rank: w, Msg: msg, Ask: ask})
}

func (n *Node) gossip(ev *messages.SequenceEvent) { put(&n.fx.out, &n.fx.gossips, Gossip{Event: ev}) }

func (n *Node) reply(to, msg any) { put(&n.fx.out, &n.fx.replies, Reply{To: to, Msg: msg}) }

func (n *Node) respond(msg any) { put(&n.fx.out, &n.fx.responds, Respond{Msg: msg}) }

func (n *Node) phase(name string, since time.Time) {
	put(&n.fx.out, &n.fx.phases, Phase{Name: name, Since: since})
}

func (n *Node) count(m CountMetric, label string, v int) {
	put(&n.fx.out, &n.fx.counts, Count{Metric: m, Label: label, N: v})
}

func (n *Node) gauge(m GaugeMetric, v int) { put(&n.fx.out, &n.fx.gauges, Gauge{Metric: m, N: v}) }

// answer completes a decision's Answer with its caller and reports it.
func (n *Node) answer(p *pending, a *Answer) {
	v := *a
	v.To, v.Req, v.Blocks, v.Started = p.caller, p.req, len(p.local), p.started
	put(&n.fx.out, &n.fx.answers, v)
}

// free frees a request on its rank and gossips the free.
func (n *Node) free(w kv.WorkerWithDpRank, id string) {
	f := &messages.FreeRequest{RequestId: id}
	if n.ranks.Has(w) {
		n.toRank(w, f, false)
	}
	n.gossip(&messages.SequenceEvent{Data: &messages.SequenceEvent_Free{Free: f}})
}
