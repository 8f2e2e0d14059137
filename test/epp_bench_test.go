package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
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
// decision.
func BenchmarkEPPDecision(b *testing.B) {
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
	calls := map[string]func(i int) error{
		"epp": func(i int) error {
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
			if err := st.CloseSend(); err != nil {
				return err
			}
			_, err = st.Recv() // EOF: the picker ended the stream and freed the request
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		},
		"grpc-route-free": func(i int) error {
			res, err := router.Route(ctx, &pb.RouteRequest{TokenIds: prompts[i%8], UpdateStates: new(true), ExpectedOutputTokens: 16})
			if err != nil {
				return err
			}
			_, err = router.Free(ctx, &pb.RequestRef{RequestId: res.GetRequestId()})
			return err
		},
	}
	for _, api := range []string{"epp", "grpc-route-free"} {
		b.Run(api, func(b *testing.B) { benchDecisions(b, calls[api]) })
	}
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
