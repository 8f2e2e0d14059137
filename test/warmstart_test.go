package test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/events"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/replica"
)

// BenchmarkWarmStart1M measures how long a replica that starts late takes
// to become ready when the KV-event stream holds 1M indexed blocks
// (10,000 Stored events of 100 blocks over 100 workers, protobuf on the
// ".pb" subject): it replays the JetStream stream before /readyz is true,
// and then holds the same index as the replica that saw the events live.
// Run: go test -run '^$' -bench WarmStart -benchtime 1x ./test/
func BenchmarkWarmStart1M(b *testing.B) {
	first := StartReplica(b, nil)
	nc := connect(b, first)
	const eventsN, blocksPer, workersN = 10_000, 100, 100
	// Events are indexed only for registered workers: the workers
	// heartbeat, to the first replica now and to the late one below.
	heartbeats := func() {
		for w := 1; w <= workersN; w++ {
			publish(b, nc, "kvrouter.workers", heartbeat(uint64(w)))
		}
	}
	heartbeats()
	for i := 0; i < eventsN; i++ {
		ev := kv.Event{Worker: kv.WorkerWithDpRank{WorkerID: kv.WorkerID(i%workersN + 1)}, EventID: uint64(i / workersN), Kind: kv.EventStored}
		for j := 0; j < blocksPer; j++ {
			h := uint64(i)*blocksPer + uint64(j) + 1
			ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(h), TokensHash: kv.LocalBlockHash(h * 7919)})
		}
		data, err := events.EncodeProtoBatch([]kv.Event{ev})
		if err != nil {
			b.Fatal(err)
		}
		if err := nc.Publish("kvrouter.kv_events.pb", data); err != nil {
			b.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	base := BaseURL(first)
	testutil.EventuallyNil(b, 2*time.Minute, func() error {
		if n := workers(b, base).IndexDigest; n == 0 {
			return fmt.Errorf("not indexed")
		}
		st, err := first.Router().Status(b.Context(), false)
		if err != nil {
			return err
		}
		if st.IndexCounters["stored_blocks"] < eventsN*blocksPer {
			return fmt.Errorf("%d blocks indexed", st.IndexCounters["stored_blocks"])
		}
		return nil
	})
	want := workers(b, base).IndexDigest
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		late := StartReplica(b, func(c *config.Config) { c.NATSURL = first.NATSURL() })
		lbase := BaseURL(late)
		testutil.EventuallyNil(b, 5*time.Minute, func() error {
			if code, body := Get(b, lbase+"/readyz"); code != http.StatusOK {
				return fmt.Errorf("not ready: %s", body)
			}
			return nil
		})
		ready := time.Since(start)
		testutil.EventuallyNil(b, time.Minute, func() error {
			heartbeats()
			if got := workers(b, lbase).IndexDigest; got != want {
				return fmt.Errorf("digest %d, want %d", got, want)
			}
			return nil
		})
		b.ReportMetric(ready.Seconds(), "s-to-ready")
		b.ReportMetric(time.Since(start).Seconds(), "s-to-same-index")
		stopReplica(late)
	}
}

func stopReplica(r *replica.Replica) { r.Kill() }
