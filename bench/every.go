package bench

import (
	"context"
	"sync/atomic"
	"time"
)

// every calls f at each interval until ctx ends, counting the calls that
// return nil when succeeded is set: the samplers of a run, and the
// callers a router meets in production (a metrics scraper, a dashboard
// polling GET /workers, the snapshot replica). A caller's error (a
// canceled step, a slow shard) is not the run's: what the run reports is
// what those calls did to the lookups.
func every(ctx context.Context, interval time.Duration, succeeded *atomic.Int64, f func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if f(ctx) == nil && succeeded != nil {
				succeeded.Add(1)
			}
		}
	}
}
