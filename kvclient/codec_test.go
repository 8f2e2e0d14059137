package kvclient

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// fullRoute sets every field of RouteRequest; the test fails when a
// field is added and not set here, so the codec's copy of the other
// fields is checked for it too.
func fullRoute(t *testing.T, ids []uint32) *pb.RouteRequest {
	r := &pb.RouteRequest{
		RequestId: "req-1", TokenIds: ids, LoraName: "lora", UpdateStates: new(false),
		PinnedWorker: &pb.WorkerRef{WorkerId: 3, DpRank: 1}, AllowedWorkerIds: []uint64{3, 4},
		ExpectedOutputTokens: 128, PriorityJump: 1.5,
		RouterConfigOverride: &pb.ConfigOverride{OverlapScoreWeight: new(2.0), AssumeKvReuse: new(true)},
		SessionId:            "s",
		Model:                "m",
		Explain:              true,
	}
	set := 0
	r.ProtoReflect().Range(func(_ protoreflect.FieldDescriptor, _ protoreflect.Value) bool { set++; return true })
	want := r.ProtoReflect().Descriptor().Fields().Len()
	if len(ids) == 0 {
		want-- // an empty repeated field is unset
	}
	if set != want {
		t.Fatalf("fullRoute sets %d of RouteRequest's %d fields", set, want)
	}
	return r
}

func TestClientCodecMatchesProtobuf(t *testing.T) {
	c := newClientCodec()
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 7, 4096} {
		ids := make([]uint32, n)
		for i := range ids {
			ids[i] = rng.Uint32() >> rng.IntN(32)
		}
		full := fullRoute(t, ids)
		bare := &pb.RouteRequest{TokenIds: ids}
		for _, tc := range []struct {
			name string
			msg  proto.Message
			into proto.Message
		}{
			{"route", full, new(pb.RouteRequest)},
			{"bare route", bare, new(pb.RouteRequest)},
			{"lifecycle route", &pb.LifecycleRequest{Id: 9, Call: &pb.LifecycleRequest_Route{Route: full}}, new(pb.LifecycleRequest)},
			{"lifecycle route, id 0", &pb.LifecycleRequest{Call: &pb.LifecycleRequest_Route{Route: bare}}, new(pb.LifecycleRequest)},
			{"lifecycle free", &pb.LifecycleRequest{Id: 2, Call: &pb.LifecycleRequest_Free{Free: &pb.RequestRef{RequestId: "x"}}}, new(pb.LifecycleRequest)},
			{"tokens query", &pb.TokensRequest{TokenIds: ids, LoraName: "l"}, new(pb.TokensRequest)},
		} {
			bufs, err := c.Marshal(tc.msg)
			if err != nil {
				t.Fatalf("%s/%d: %v", tc.name, n, err)
			}
			wire := bufs.Materialize()
			bufs.Free()
			if want := proto.Size(tc.msg); len(wire) != want {
				t.Errorf("%s/%d: %d bytes, protobuf-go writes %d", tc.name, n, len(wire), want)
			}
			if err := proto.Unmarshal(wire, tc.into); err != nil || !proto.Equal(tc.into, tc.msg) {
				t.Fatalf("%s/%d: protobuf-go reads %v (%v), want %v", tc.name, n, tc.into, err, tc.msg)
			}
		}
	}
}

func TestClientCodecKeepsUnknownFields(t *testing.T) {
	r := &pb.RouteRequest{TokenIds: []uint32{1, 2}}
	r.ProtoReflect().SetUnknown([]byte{0xf8, 0x06, 0x01}) // field 111, varint 1
	bufs, err := newClientCodec().Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got pb.RouteRequest
	if err := proto.Unmarshal(bufs.Materialize(), &got); err != nil || !proto.Equal(&got, r) {
		t.Fatalf("got %v (%v), want %v with its unknown field", &got, err, r)
	}
}

// The client's codec reads a route reply (unary, or inside a Lifecycle
// response) as protobuf-go does, every field included (index_trust among
// them); the test fails when a field is added to RouteResponse and not
// set here.
func TestClientCodecDecodesEveryRouteResponseField(t *testing.T) {
	res := &pb.RouteResponse{
		RequestId: "r", WorkerId: 3, DpRank: 1, OverlapBlocks: 4, CachedTokens: 64,
		PrefillWorker: &pb.WorkerRef{WorkerId: 5, DpRank: 2}, PrefillOverlapBlocks: 2, PrefillCachedTokens: 32,
		PrefillRequestId: "r-prefill", IndexTrust: "degraded", ReceiptJson: `{"winner":"3/1"}`,
	}
	set := 0
	res.ProtoReflect().Range(func(protoreflect.FieldDescriptor, protoreflect.Value) bool { set++; return true })
	if want := res.ProtoReflect().Descriptor().Fields().Len(); set != want {
		t.Fatalf("the reply sets %d of RouteResponse's %d fields", set, want)
	}
	c := newClientCodec()
	for _, tc := range []struct {
		name      string
		msg, into proto.Message
	}{
		{"route", res, new(pb.RouteResponse)},
		{"lifecycle route", &pb.LifecycleResponse{Id: 9, Result: &pb.LifecycleResponse_Route{Route: res}}, new(pb.LifecycleResponse)},
	} {
		wire, err := proto.Marshal(tc.msg)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, tc.into); err != nil || !proto.Equal(tc.into, tc.msg) {
			t.Fatalf("%s: read %v (%v), want %v", tc.name, tc.into, err, tc.msg)
		}
	}
}
