package httpapi

import (
	"context"
	"time"
)

// leaseRenewer renews a proxied request's lease while its answer streams
// (sequence.LeasePolicy): a renewal grants the lease minimum from then
// on, and one is sent at most every quarter of it, when a line of the
// answer arrives. Off when requests have no lease.
type leaseRenewer struct {
	s     *Server
	id    string
	every time.Duration
	last  time.Time
}

func (s *Server) leaseRenewer(id string) *leaseRenewer {
	seq := s.opts.Router.Config().Sequence
	return &leaseRenewer{s: s, id: id, every: seq.Lease.Renewal(seq.ExpiryDuration) / 4, last: time.Now()}
}

// line notes a line of the answer and renews when it is time.
func (l *leaseRenewer) line() {
	if l.every <= 0 {
		return
	}
	now := time.Now()
	if now.Sub(l.last) < l.every {
		return
	}
	l.last = now
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.s.opts.Router.RenewLease(ctx, l.id); err != nil {
		l.s.log.Debug("lease renewal failed", "request", l.id, "err", err)
	}
}
