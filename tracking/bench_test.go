package tracking

import (
	"strconv"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// BenchmarkTrackUntrack is one request's bookkeeping in the scheduler's
// table (track on the decision, untrack on the free), with 4,096 requests
// in flight, unnamed and spread over 64 named clients.
func BenchmarkTrackUntrack(b *testing.B) {
	for _, named := range []bool{false, true} {
		b.Run(map[bool]string{false: "unnamed", true: "64-clients"}[named], func(b *testing.B) {
			tb := New()
			ids := make([]string, 4096)
			clients := make([]string, 64)
			for i := range clients {
				clients[i] = "token:" + strconv.Itoa(i)
			}
			client := func(i int) string {
				if !named {
					return ""
				}
				return clients[i%len(clients)]
			}
			for i := range ids {
				ids[i] = "req-" + strconv.Itoa(i)
				tb.Track(ids[i], Entry{Rank: kv.WorkerWithDpRank{WorkerID: 1}, Client: client(i)})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := ids[i%len(ids)]
				c := client(i)
				_ = tb.ClientActive(c)
				tb.Untrack(id)
				tb.Track(id, Entry{Rank: kv.WorkerWithDpRank{WorkerID: 1}, Client: c})
			}
		})
	}
}
