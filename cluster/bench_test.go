package cluster

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/messages"
)

// BenchmarkGossipPath measures what gossip costs the two ends of one peer
// link per routing decision (an add with the prompt's hashes, a prefill
// completion and a free), in process CPU: the origin's batching, framing
// and stream write, the peer's read, decode, checks and apply to a map
// sink. "plaintext" is a cluster without keys, "tls" one with a cluster
// key (memberlist AES-GCM, streams TLS 1.3). 32 hashes is a 4,096-token
// prompt at stride 8, 256 at Dynamo's stride 1.
func BenchmarkGossipPath(b *testing.B) {
	for _, hashes := range []int{32, 256} {
		for _, mode := range []string{"plaintext", "tls"} {
			b.Run(fmt.Sprintf("%s/hashes=%d", mode, hashes), func(b *testing.B) {
				tweak := func(c *Config) {
					c.BatchInterval = time.Millisecond
					if mode == "tls" {
						c.Keys = [][]byte{testKey(1)}
					}
				}
				a := startReplica(b, "r0", nil, tweak)
				p := startReplica(b, "r1", []string{a.node.LocalAddr()}, tweak)
				deadline := time.Now().Add(5 * time.Second)
				for a.node.Stats().Members != 2 || p.node.Stats().Members != 2 {
					if time.Now().After(deadline) {
						b.Fatal("no membership")
					}
					time.Sleep(10 * time.Millisecond)
				}
				hs := make([]uint64, hashes)
				for i := range hs {
					hs[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
				}
				publish := func(ev *messages.SequenceEvent) {
					for a.node.Publish(ev) == ErrQueueFull {
						time.Sleep(100 * time.Microsecond)
					}
				}
				want := p.node.Stats().EventsReceived + 3*uint64(b.N)
				cpu0 := processCPU()
				start := time.Now()
				for i := range b.N {
					id := fmt.Sprintf("req-%d", i)
					publish(addEvent(id, hs...))
					publish(prefillEvent(id))
					publish(freeEvent(id))
				}
				for p.node.Stats().EventsReceived < want {
					if time.Since(start) > time.Minute {
						b.Fatalf("peer received %d of %d events", p.node.Stats().EventsReceived, want)
					}
					time.Sleep(time.Millisecond)
				}
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/decision")
				if st := a.node.Stats(); st.StreamMessages == 0 || st.TCPMessages+st.UDPMessages > 2 {
					b.Fatalf("the stream was not used: %+v", st)
				}
			})
		}
	}
}

// processCPU is the process's user + system CPU time in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
