package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
)

// BenchmarkFreeAcknowledged is POST /free on a 3-replica in-process
// cluster (real memberlist and streams on loopback, the default 5 ms
// gossip batches): each op routes a request through one replica and
// frees it through the same one, whose answer waits until the free's
// gossip was written to both peers. It reports the free's p50 and p99
// latency and the process CPU per op (route and free, the three
// replicas' gossip and apply, and the client). back-to-back: one op after
// the other, so a batch has always left within the interval (the wait is
// up to a batch interval); paced: an op every 20 ms, gossip otherwise
// quiet (the open batch leaves at once).
func BenchmarkFreeAcknowledged(b *testing.B) {
	reps := startClusterTB(b, 3)
	nc := connect(b, reps[0])
	publish(b, nc, "kvrouter.workers", heartbeat(1))
	for _, r := range reps {
		base := BaseURL(r)
		testutil.EventuallyNil(b, 5*time.Second, func() error {
			if n := len(workers(b, base).Workers); n != 1 {
				return fmt.Errorf("%s: %d workers", base, n)
			}
			return nil
		})
	}
	base := BaseURL(reps[1])
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(path, body string) {
		resp, err := client.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	toks, err := json.Marshal(tokens(256, 7))
	if err != nil {
		b.Fatal(err)
	}
	for _, pace := range []time.Duration{0, 20 * time.Millisecond} {
		name := "back-to-back"
		if pace > 0 {
			name = "paced-" + pace.String()
		}
		b.Run(name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			cpu0 := selfCPU()
			for i := range b.N {
				id := fmt.Sprintf("bench-%s-%d-%d", name, b.N, i)
				post("/route", fmt.Sprintf(`{"request_id":%q,"token_ids":%s}`, id, toks))
				start := time.Now()
				post("/free", fmt.Sprintf(`{"request_id":%q}`, id))
				lat = append(lat, time.Since(start))
				if pace > 0 {
					time.Sleep(pace)
				}
			}
			cpu := selfCPU() - cpu0
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "free-p50-us")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "free-p99-us")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}
