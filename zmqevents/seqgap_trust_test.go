package zmqevents

import (
	"context"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

type gapLog struct{ missed []uint64 }

func (g *gapLog) GapOpened(_ kv.WorkerWithDpRank, missed uint64) { g.missed = append(g.missed, missed) }
func (g *gapLog) ReplayCompleted(kv.WorkerWithDpRank)            {}
func (g *gapLog) ReplayFailed(kv.WorkerWithDpRank, string)       {}

// With no replay endpoint a gap cannot be repaired: it is reported with
// the batches it lost. After a restart (the sequence going back to 2) the
// new process's batches 0 and 1 were lost too.
func TestSeqGapReportedToTrust(t *testing.T) {
	rs, _ := seqStream(t)
	log := &gapLog{}
	rs.s.opts.Trust = log
	for _, seq := range []uint64{0, 1, 5, 6, 2, 3, 9} {
		rs.onLive(context.Background(), liveFrames(t, seq))
	}
	if len(log.missed) != 3 || log.missed[0] != 3 || log.missed[1] != 2 || log.missed[2] != 5 {
		t.Fatalf("gaps reported %v, want [3 2 5]", log.missed)
	}
}
