package replica

import (
	"context"
	"errors"

	"github.com/kvrouter/kvrouter/metrics"
)

// clusterLink is the replica's membership in a multi-replica cluster.
type clusterLink struct{}

// joinCluster joins the memberlist cluster when --cluster-bind is set.
func (r *Replica) joinCluster(context.Context) error {
	if r.cfg.ClusterBind != "" {
		return errors.New("--cluster-bind: multi-replica clustering is not available in this build yet")
	}
	return nil
}

func (c *clusterLink) Publish(any)                 {}
func (c *clusterLink) Addr() string                { return "" }
func (c *clusterLink) Leave(context.Context) error { return nil }
func (c *clusterLink) addState(*metrics.State)     {}
