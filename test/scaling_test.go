package test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/replica"
)

// BenchmarkClusterDecisionCPU measures the CPU one routing decision costs
// (route with update_states, then free — the add and free are gossiped)
// with 1 replica and with 3 replicas sharing the traffic round-robin. On
// this 2-core machine the replicas cannot each get a core, so scaling is
// derived: with a core per replica, 3 replicas decide 3 × cpu(1)/cpu(3)
// times as fast as one, the gap being the gossip each decision causes on
// every peer.
// Run: go test -run '^$' -bench ClusterDecisionCPU -benchtime 3000x ./test/
func BenchmarkClusterDecisionCPU(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			var reps []*replica.Replica
			if n == 1 {
				reps = []*replica.Replica{StartReplica(b, nil)}
			} else {
				reps = startClusterTB(b, n)
			}
			nc := connect(b, reps[0])
			for id := uint64(1); id <= 16; id++ {
				publish(b, nc, "kvrouter.workers", heartbeat(id))
			}
			for _, r := range reps {
				base := BaseURL(r)
				testutil.EventuallyNil(b, 10*time.Second, func() error {
					if k := len(workers(b, base).Workers); k != 16 {
						return fmt.Errorf("%d workers", k)
					}
					return nil
				})
			}
			prompts := make([][]uint32, 8)
			for i := range prompts {
				prompts[i] = tokens(1024, uint32(i))
			}
			ctx := context.Background()
			var next atomic.Int64
			cpu0 := cpuTime()
			b.ResetTimer()
			// Concurrent clients, as a router under load has: decisions made
			// within one batch interval share a gossip message.
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(next.Add(1))
					r := reps[i%n].Router()
					id := fmt.Sprintf("d%d", i)
					if _, err := r.Route(ctx, &messages.RouteRequest{RequestId: id, TokenIds: prompts[i%8], UpdateStates: true}); err != nil {
						b.Error(err)
						return
					}
					if err := r.Free(ctx, id); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			// Let the peers apply the gossip the decisions caused.
			time.Sleep(200 * time.Millisecond)
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/decision")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
