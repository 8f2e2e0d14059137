package grpcapi_test

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// FuzzRoute sends arbitrary route requests (tokens, ids, constraints,
// overrides) over the socket, as a call and over a Lifecycle stream:
// the answer is a decision or a client error, never INTERNAL or a panic.
func FuzzRoute(f *testing.F) {
	e := newEnv(f, envOptions{workers: 2})
	ctx := context.Background()
	s, err := e.client.OpenStream(ctx)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0, 0}, "r", uint64(0), 0.5, true, uint8(0))
	f.Add([]byte{}, "", uint64(9), math.NaN(), false, uint8(3))
	f.Add([]byte{255, 255, 255, 255}, "\xff", uint64(1), -1.0, true, uint8(7))
	f.Fuzz(func(t *testing.T, raw []byte, id string, worker uint64, knob float64, update bool, which uint8) {
		if !utf8.ValidString(id) {
			// proto3 strings are UTF-8: no client can send this one (grpc-go
			// refuses to marshal it; a server-side decode failure is gRPC's
			// own INTERNAL, before any of our code runs).
			id = strings.ToValidUTF8(id, "?")
		}
		tokens := make([]uint32, 0, len(raw)/4)
		for i := 0; i+4 <= len(raw); i += 4 {
			tokens = append(tokens, binary.LittleEndian.Uint32(raw[i:]))
		}
		req := &pb.RouteRequest{RequestId: id, TokenIds: tokens, UpdateStates: &update, PriorityJump: knob}
		if which&1 != 0 {
			req.PinnedWorker = &pb.WorkerRef{WorkerId: worker, DpRank: uint32(worker >> 32)}
		}
		if which&2 != 0 {
			req.AllowedWorkerIds = []uint64{worker, worker + 1}
		}
		if which&4 != 0 {
			req.RouterConfigOverride = &pb.ConfigOverride{OverlapScoreWeight: &knob, OverlapScoreCredit: &knob, RouterTemperature: &knob}
		}
		check := func(how string, res *pb.RouteResponse, err error) {
			switch status.Code(err) {
			case codes.OK:
				if update {
					_ = e.client.Free(ctx, res.RequestId)
				}
			case codes.InvalidArgument, codes.Unavailable, codes.NotFound, codes.ResourceExhausted:
			default:
				t.Fatalf("%s %v: %v", how, req, err)
			}
		}
		res, err := e.client.Route(ctx, req)
		check("call", res, err)
		if id != "" {
			req.RequestId = id + "-stream"
		}
		res, err = s.Route(ctx, req)
		check("stream", res, err)
	})
}
