package decide

import (
	"errors"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// The backpressure queue is the Decider's: a recorded request its
// admitter refuses waits here (scheduling.Queue, fcfs, wspt or lcfs)
// until a re-check admits it, its client leaves, or it waited MaxQueueWait.
// Its payload is the owner's id for the request (Decide.ID).

func queueID(id uint64) string { return strconv.FormatUint(id, 10) }

// park queues a request the admitter refused. A request re-checked from
// the queue head is still in the queue: it keeps its place and its
// enqueue time (the wait bound counts from its arrival). A full queue
// refuses it as overloaded.
func (d *Decider) park(now time.Time, in *Decide) []Effect {
	p := in.Plan
	if p.Queued {
		d.recheckDone(in.ID)
		return d.emitQueue(Queue{BestCached: p.BestCached})
	}
	err := d.queue.Push(scheduling.Waiting[uint64]{
		ID: queueID(in.ID), PriorityJump: in.Req.PriorityJump,
		ISL: uint64(len(in.Req.TokenIds)), CachedTokens: p.BestCached, Payload: in.ID,
	}, now)
	if err != nil {
		rerr := RouteErr(messages.RouteErrorCode_ROUTE_ERROR_OVERLOADED, "%v", err)
		var oe *scheduling.OverloadError
		if errors.As(err, &oe) {
			rerr.QueueDepth, rerr.QueueLimit = uint32(oe.QueueDepth), uint32(oe.Limit)
		}
		return d.emitAnswer(Answer{Err: rerr, Outcome: "overloaded"})
	}
	p.Queued = true
	return d.emitQueue(Queue{BestCached: p.BestCached, Parked: true})
}

// Forget takes a request out of the queue if it waits there (it is being
// answered, or its client left).
func (d *Decider) Forget(p *Plan, id uint64) {
	d.recheckDone(id)
	if p.Queued {
		d.queue.Remove(queueID(id))
		p.Queued = false
	}
}

// Recheck is the owner's id of the queued request to re-check next (a
// Start with Recheck, then a Decide): the queue's head, unless a re-check
// is under way. One at a time, so a burst of frees does not re-query the
// fleet once per free; the re-check is over when its request is parked
// again or forgotten.
func (d *Decider) Recheck() (uint64, bool) {
	if d.rechecking {
		return 0, false
	}
	w, ok := d.queue.Peek()
	if ok {
		d.rechecking, d.recheckID = true, w.Payload
	}
	return w.Payload, ok
}

func (d *Decider) recheckDone(id uint64) {
	if d.rechecking && d.recheckID == id {
		d.rechecking = false
	}
}

// Drop takes id out of the queue whatever its plan says (its owner no
// longer holds it).
func (d *Decider) Drop(id uint64) {
	d.recheckDone(id)
	d.queue.Remove(queueID(id))
}

// QueueLen is how many requests wait.
func (d *Decider) QueueLen() int { return d.queue.Len() }

// Expire takes out, oldest first, the requests that waited longer than
// MaxQueueWait at now (scheduling.Queue.DropEnqueuedBefore) and returns
// their ids; each is answered with WaitedTooLong.
func (d *Decider) Expire(now time.Time) []uint64 {
	if d.cfg.MaxQueueWait <= 0 {
		return nil
	}
	dropped := d.queue.DropEnqueuedBefore(now.Add(-d.cfg.MaxQueueWait))
	ids := make([]uint64, len(dropped))
	for i, w := range dropped {
		ids[i] = w.Payload
	}
	return ids
}

// WaitedTooLong is the answer of a request Expire took out (its plan is
// no longer queued).
func (d *Decider) WaitedTooLong(p *Plan) *messages.RouteError {
	p.Queued = false
	rerr := RouteErr(messages.RouteErrorCode_ROUTE_ERROR_OVERLOADED,
		"waited %s in the queue and every eligible worker is still over the queue threshold", d.cfg.MaxQueueWait)
	rerr.QueueDepth, rerr.QueueLimit = uint32(d.queue.Len()), uint32(d.queue.Limit())
	return rerr
}
