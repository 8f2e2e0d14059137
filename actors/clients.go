package actors

import (
	"context"
	"fmt"

	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// ErrClientLimit: the calling client's own active-request bound refused
// the call (it matches ErrLimit too).
var ErrClientLimit = scheduling.ErrClientLimit

type clientKey struct{}

// WithClient names the client of the calls made with ctx (the API edge
// derives the name from the bearer token or the peer address): Route
// records its requests under that name, and the per-client bound counts
// them.
func WithClient(ctx context.Context, client string) context.Context {
	return context.WithValue(ctx, clientKey{}, client)
}

// ClientFrom is the client WithClient named ("" when none).
func ClientFrom(ctx context.Context) string {
	c, _ := ctx.Value(clientKey{}).(string)
	return c
}

// ClientLoad is how this replica's own active requests spread over their
// clients.
type ClientLoad struct {
	// Tracked is this replica's own active requests; Clients how many
	// named clients hold one.
	Tracked, Clients int
	// Top is the client holding the most, TopActive how many.
	Top       string
	TopActive int
	// Limit is the per-client bound (0: none); Saturated says the top
	// client reached it, so its further routes are refused.
	Limit     int
	Saturated bool
}

// Share is the top client's share of the tracked requests (0 when none).
func (c ClientLoad) Share() float64 {
	if c.Tracked == 0 {
		return 0
	}
	return float64(c.TopActive) / float64(c.Tracked)
}

// Clients reports how the requests this replica routed spread over their
// clients.
func (r *Router) Clients(ctx context.Context) (ClientLoad, error) {
	res, err := r.ask(ctx, r.scheduler, &messages.TrackedQuery{})
	if err != nil {
		return ClientLoad{}, fmt.Errorf("client load: %w", err)
	}
	t := res.(*messages.TrackedReply)
	l := r.cfg.Limits
	return ClientLoad{Tracked: int(t.TrackedRequests), Clients: int(t.Clients), Top: t.TopClient,
		TopActive: int(t.TopClientRequests), Limit: l.MaxActiveRequestsPerClient,
		Saturated: l.SaturatedBy(int(t.TopClientRequests))}, nil
}

// RenewLease says a request of this replica is still being served: its
// lease runs at least the lease minimum from now (sequence.LeasePolicy).
func (r *Router) RenewLease(ctx context.Context, id string) error {
	return r.lifecycle(ctx, &messages.RequestLifecycle{RequestId: id,
		Step: &messages.RequestLifecycle_RenewLease{RenewLease: &messages.RenewLease{RequestId: id}}})
}
