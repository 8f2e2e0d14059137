package replica

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/httpapi"
	"github.com/kvrouter/kvrouter/metrics"
)

// clusterMembership is the cluster's readiness rule (cluster.Node.Membership):
// short of the expected members, a replica is not ready until it first
// was; after that only a key mismatch takes it out (a partition that left
// every replica alone must not take every replica out of the load
// balancer at once, but a replica whose key is wrong is wrong alone).
func (r *Replica) clusterMembership() error {
	if r.cluster == nil {
		return nil
	}
	err := r.cluster.node.Membership(r.cfg.ClusterMinMembers)
	if err == nil || (r.wasReady.Load() && !errors.Is(err, cluster.ErrKeyMismatch)) {
		return nil
	}
	return err
}

// readyConditions are what /readyz reports beside its verdict: the
// cluster's membership (with a cluster) and whether one client holds its
// whole per-client bound of this replica's requests.
func (r *Replica) readyConditions(ctx context.Context) []httpapi.ReadyCondition {
	var out []httpapi.ReadyCondition
	if r.cluster != nil {
		c := httpapi.ReadyCondition{Name: "cluster", OK: true}
		if err := r.cluster.node.Membership(r.cfg.ClusterMinMembers); err != nil {
			c.OK, c.Reason = false, err.Error()
		}
		out = append(out, c)
	}
	c := httpapi.ReadyCondition{Name: "clients", OK: true}
	load, err := r.router.Clients(ctx)
	switch {
	case err != nil:
		c.OK, c.Reason = false, err.Error()
	case load.Saturated:
		c.OK = false
		c.Reason = fmt.Sprintf("one client holds %d of the %d requests this replica routed (%.0f%%), its bound (max-active-requests-per-client): its further routes get 429, other clients are served",
			load.TopActive, load.Tracked, 100*load.Share())
	}
	return append(out, c)
}

// addClientState adds how this replica's own requests spread over their
// clients to a scrape.
func (r *Replica) addClientState(ctx context.Context, st *metrics.State) {
	load, err := r.router.Clients(ctx)
	if err != nil {
		return
	}
	st.Gauges["clients_active"] = float64(load.Clients)
	st.Gauges["client_top_active_requests"] = float64(load.TopActive)
	st.Gauges["client_top_share"] = load.Share()
	saturated := 0.0
	if load.Saturated {
		saturated = 1
	}
	st.Gauges["client_saturated"] = saturated
}
