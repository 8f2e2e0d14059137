package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	procmode "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvrouter/kvrouter/config"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// BenchmarkEPPDecision compares one recorded decision through the
// endpoint picker (an ext_proc stream as Envoy runs it in full-duplex
// mode: headers, the /v1/completions body in one piece, the pick and the
// body echoed back, then the stream closed, which frees the request)
// with the same decision through the gRPC API (unary Route with
// update_states, then Free), against one replica with 64 registered
// workers and 4k-token prompts, 8 callers per core over loopback.
// cpu-us/decision is the process's CPU (client and replica) per
// decision; p50/p99 are whole calls (through the free).
func BenchmarkEPPDecision(b *testing.B) {
	calls := eppBenchCalls(b)
	for _, api := range []string{"epp", "grpc-route-free"} {
		b.Run(api, func(b *testing.B) { benchDecisions(b, func(i int) error { return calls[api](i, nil) }) })
	}
}

// BenchmarkEPPLatency is the picker's added latency at half its maximum
// rate: the closed loop of BenchmarkEPPDecision first finds the most
// ext_proc decisions per second this machine serves, then each API is
// driven open-loop at half that rate (the same rate for both, b.N
// requests at even intervals, each on its own goroutine, whatever the
// earlier ones do). A request's latency runs from its scheduled start
// (a late start counts) to the moment the gateway could forward it: the
// pick and the whole echoed body received through ext_proc, the Route
// answer through gRPC; the free that follows is not timed.
func BenchmarkEPPLatency(b *testing.B) {
	calls := eppBenchCalls(b)
	closedLoopRate(b, calls["epp"], 500) // warm up: connections, buffers, the scheduler's state
	maxRate := closedLoopRate(b, calls["epp"], 2000)
	for _, api := range []string{"epp", "grpc-route-free"} {
		b.Run(api, func(b *testing.B) {
			openLoop(b, calls[api], maxRate/2)
			b.ReportMetric(maxRate, "max-epp-decisions/s")
		})
	}
}

// eppCall makes one decision (i picks the prompt); it calls routed, when
// not nil, as soon as the request could be forwarded, and returns once
// the request is freed.
type eppCall func(i int, routed func()) error

// eppBenchCalls starts the benchmarks' replica (64 static workers, the
// picker and the gRPC API on loopback) and returns its two ways to make
// a decision, "epp" and "grpc-route-free".
func eppBenchCalls(b *testing.B) map[string]eppCall {
	var static []string
	for i := 1; i <= 64; i++ {
		static = append(static, fmt.Sprintf("%d=http://127.0.0.1:%d", i, 20000+i))
	}
	rep := StartReplica(b, func(c *config.Config) {
		c.EPPAddr, c.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
		c.StaticWorkers = static
		c.LogLevel = "error"
	})
	prompts := make([][]uint32, 8)
	bodies := make([][]byte, 8)
	for g := range prompts {
		prompts[g] = tokens(4096, uint32(g+1))
		bodies[g] = jsonBody(b, map[string]any{"prompt": prompts[g], "max_tokens": 16})
	}
	dial := func(addr string) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	eppConn, routeConn := dial(rep.EPPAddr()), dial(rep.GRPCAddr())
	picker, router := extproc.NewExternalProcessorClient(eppConn), pb.NewRouterClient(routeConn)
	headers := headerMap(map[string]string{":method": "POST", ":path": "/v1/completions", "content-type": "application/json"})
	pc := &extproc.ProtocolConfiguration{RequestBodyMode: procmode.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseBodyMode: procmode.ProcessingMode_FULL_DUPLEX_STREAMED}
	ctx := context.Background()
	return map[string]eppCall{
		"epp": func(i int, routed func()) error {
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			st, err := picker.Process(sctx)
			if err != nil {
				return err
			}
			if err := st.Send(&extproc.ProcessingRequest{ProtocolConfig: pc,
				Request: &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{Headers: headers}}}); err != nil {
				return err
			}
			if err := st.Send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestBody{
				RequestBody: &extproc.HttpBody{Body: bodies[i%8], EndOfStream: true}}}); err != nil {
				return err
			}
			r, err := st.Recv()
			if err != nil {
				return err
			}
			if r.GetRequestHeaders() == nil {
				return fmt.Errorf("no pick: %v", r)
			}
			for {
				r, err := st.Recv()
				if err != nil {
					return err
				}
				if r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
					break
				}
			}
			if routed != nil {
				routed()
			}
			if err := st.CloseSend(); err != nil {
				return err
			}
			_, err = st.Recv() // EOF: the picker ended the stream and freed the request
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		},
		"grpc-route-free": func(i int, routed func()) error {
			res, err := router.Route(ctx, &pb.RouteRequest{TokenIds: prompts[i%8], UpdateStates: new(true), ExpectedOutputTokens: 16})
			if err != nil {
				return err
			}
			if routed != nil {
				routed()
			}
			_, err = router.Free(ctx, &pb.RequestRef{RequestId: res.GetRequestId()})
			return err
		},
	}
}

// closedLoopRate is the decisions per second n calls of call make from
// 8 callers per core, each starting its next call when the last ended.
func closedLoopRate(b *testing.B, call eppCall, n int) float64 {
	callers := 8 * runtime.GOMAXPROCS(0)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if err := call(int(i), nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// openLoop starts b.N calls at rate per second, evenly spaced, and
// reports the p50 and p99 latency from each call's scheduled start to
// its routed mark, the rate it kept, and the CPU per decision. At most
// maxInFlight calls run at once: more would mean the rate is past what
// the replica serves, which fails the benchmark.
func openLoop(b *testing.B, call eppCall, rate float64) {
	const maxInFlight = 4096
	interval := time.Duration(float64(time.Second) / rate)
	lat := make([]time.Duration, b.N)
	var inFlight atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0 := selfCPU()
	start := time.Now()
	for i := range b.N {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if inFlight.Add(1) > maxInFlight {
			b.Fatalf("%d calls in flight at %.0f/s: the rate is past what the replica serves", maxInFlight, rate)
		}
		wg.Go(func() {
			defer inFlight.Add(-1)
			if err := call(i, func() { lat[i] = time.Since(due) }); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := selfCPU() - cpu0
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(rate, "offered/s")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/decision")
}

// benchDecisions runs call from 8 goroutines per core and reports
// decisions/s, the p50 and p99 latency and the CPU per decision.
func benchDecisions(b *testing.B, call func(i int) error) {
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(8)
	b.ResetTimer()
	cpu0 := selfCPU()
	start := time.Now()
	b.RunParallel(func(p *testing.PB) {
		var local []time.Duration
		i := 0
		for p.Next() {
			i++
			t0 := time.Now()
			if err := call(i); err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	cpu := selfCPU() - cpu0
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "decisions/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
		b.ReportMetric(float64(cpu.Microseconds())/float64(len(lat)), "cpu-us/decision")
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
