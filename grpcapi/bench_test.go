package grpcapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// BenchmarkGRPCRoute is httpapi's BenchmarkHTTPRoute (query-only
// decisions on 4k-token prompts, 64 workers, 8 callers per core over
// real loopback sockets) through each API against the same router, so
// the ratio comes out of one run: json (POST /route, keep-alive), grpc
// (unary Route on one connection) and grpc-stream (one Lifecycle stream;
// its client encodes each request). cpu-us/decision is the process's
// CPU (client and router) per decision: steadier than decisions/s on a
// shared machine.
func BenchmarkGRPCRoute(b *testing.B) {
	e := newEnv(b, envOptions{workers: 64})
	prompts := make([][]uint32, 8)
	encoded := make([][]byte, 8)
	bodies := make([][]byte, 8)
	for g := range prompts {
		prompts[g] = prompt(4096, uint32(g*100000))
		encoded[g] = bench.NewEncodedRoute(prompts[g]).Append(nil, "", false)
		var buf bytes.Buffer
		buf.WriteString(`{"update_states":false,"token_ids":[`)
		for i, tok := range prompts[g] {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(strconv.FormatUint(uint64(tok), 10))
		}
		buf.WriteString(`]}`)
		bodies[g] = buf.Bytes()
	}
	ctx := context.Background()
	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	stream, err := e.client.OpenStream(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = stream.Close(ctx) }()
	calls := map[string]func(i int) error{
		"json": func(i int) error {
			resp, err := httpClient.Post(e.httpURL+"/route", "application/json", bytes.NewReader(bodies[i%8]))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != 200 {
				return &statusError{resp.StatusCode}
			}
			return nil
		},
		// Pre-encoded, as the JSON bodies are pre-serialized: the client
		// shares the process's CPU with the router.
		"grpc": func(i int) error {
			var res pb.RouteResponse
			return bench.RouteEncoded(ctx, e.client.Conn(), encoded[i%8], &res)
		},
		"grpc-stream": func(i int) error {
			_, err := stream.Route(ctx, &pb.RouteRequest{TokenIds: prompts[i%8], UpdateStates: new(false)})
			return err
		},
	}
	for _, api := range []string{"json", "grpc", "grpc-stream"} {
		b.Run(api, func(b *testing.B) { benchCalls(b, calls[api]) })
	}
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "status " + strconv.Itoa(e.code) }

// benchCalls runs call from 8 goroutines per core and reports
// decisions/s and the p99 latency.
func benchCalls(b *testing.B, call func(i int) error) {
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(8)
	b.ResetTimer()
	cpu0 := processCPU()
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
	cpu := processCPU() - cpu0
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "decisions/s")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
		b.ReportMetric(float64(cpu.Microseconds())/float64(len(lat)), "cpu-us/decision")
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
