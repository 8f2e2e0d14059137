package grpcapi

import (
	"errors"
	"math"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kvrouter/kvrouter/internal/tokenwire"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// hasWideID reports whether some varint in b, read at any offset, is
// above 2^32-1: a loose witness that a refused message could hold such a
// token id.
func hasWideID(b []byte) bool {
	for i := range b {
		if v, n := protowire.ConsumeVarint(b[i:]); n > 0 && v > math.MaxUint32 {
			return true
		}
	}
	return false
}

// FuzzDecodeRouteRequest checks the route decoder against protobuf-go:
// the same bytes give the same message or both an error.
func FuzzDecodeRouteRequest(f *testing.F) {
	full, _ := proto.Marshal(&pb.RouteRequest{RequestId: "r", TokenIds: []uint32{0, 1, 127, 128, 300, 1<<32 - 1}, LoraName: "l",
		UpdateStates: new(true), PinnedWorker: &pb.WorkerRef{WorkerId: 3}, AllowedWorkerIds: []uint64{1, 2}, PriorityJump: 1.5,
		RouterConfigOverride: &pb.ConfigOverride{OverlapScoreWeight: new(2.0)}})
	f.Add(full)
	unpacked := protowire.AppendTag(nil, 2, protowire.VarintType)
	unpacked = protowire.AppendVarint(unpacked, 1<<40+5) // above 2^32-1: refused
	f.Add(append(unpacked, full...))
	f.Add([]byte{0x12, 0x02, 0x80, 0x80})                                                 // truncated varint
	f.Add([]byte{0x12, 0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}) // overflowing varint
	f.Add([]byte{0x0a, 0x02, 0xff, 0xfe})                                                 // invalid UTF-8 request id
	f.Fuzz(func(t *testing.T, b []byte) { matchesProtobuf(t, b, DecodeRouteRequest) })
}

// FuzzDecodeLifecycleRequest checks the stream's decoder against
// protobuf-go the same way, seeded with each call and with the shapes
// that must leave the fast path (a repeated route merges, a later call
// of the oneof wins, unknown fields are kept).
func FuzzDecodeLifecycleRequest(f *testing.F) {
	route := &pb.RouteRequest{RequestId: "r", TokenIds: []uint32{1, 300, 100000}, UpdateStates: new(false)}
	routeCall, _ := proto.Marshal(&pb.LifecycleRequest{Id: 7, Call: &pb.LifecycleRequest_Route{Route: route}})
	freeCall, _ := proto.Marshal(&pb.LifecycleRequest{Id: 8, Call: &pb.LifecycleRequest_Free{Free: &pb.RequestRef{RequestId: "r"}}})
	f.Add(routeCall)
	f.Add(freeCall)
	f.Add(append(slices.Clone(routeCall), routeCall...)) // route twice: merged
	f.Add(append(slices.Clone(routeCall), freeCall...))  // the free wins
	f.Add(append(slices.Clone(freeCall), routeCall...))  // the route wins
	f.Add(protowire.AppendVarint(protowire.AppendTag(slices.Clone(routeCall), 99, protowire.VarintType), 1))
	f.Add([]byte{0x12, 0x00})             // an empty route
	f.Add([]byte{0x08, 0x01, 0x12, 0x05}) // a truncated route
	f.Fuzz(func(t *testing.T, b []byte) { matchesProtobuf(t, b, DecodeLifecycleRequest) })
}

// FuzzDecodeTokensRequest checks OverlapScores' and PotentialLoads'
// decoder against protobuf-go.
func FuzzDecodeTokensRequest(f *testing.F) {
	full, _ := proto.Marshal(&pb.TokensRequest{TokenIds: []uint32{0, 1, 127, 128, 300, 1<<32 - 1}, LoraName: "l"})
	f.Add(full)
	f.Add(append(slices.Clone(full), full...)) // ids append, the name is the last one
	f.Add(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1<<40+5))
	f.Add([]byte{0x0a, 0x02, 0x80, 0x80}) // truncated varint
	f.Add([]byte{0x12, 0x02, 0xff, 0xfe}) // invalid UTF-8 name
	f.Fuzz(func(t *testing.T, b []byte) { matchesProtobuf(t, b, DecodeTokensRequest) })
}

// matchesProtobuf fails unless decode reads b as proto.Unmarshal does:
// the same message, or an error from both.
func matchesProtobuf[M any, P interface {
	*M
	proto.Message
}](t *testing.T, b []byte, decode func([]byte, P) error) {
	want, got := P(new(M)), P(new(M))
	werr := proto.Unmarshal(b, want)
	gerr := decode(b, got)
	if errors.Is(gerr, tokenwire.ErrWide) {
		// protobuf-go truncates such an id to another token; ours
		// refuses it (as the JSON API does). The bytes must hold one.
		if !hasWideID(b) {
			t.Fatalf("%x: ErrWide without a token id above 2^32-1", b)
		}
		return
	}
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%x: protobuf-go %v, ours %v", b, werr, gerr)
	}
	if werr == nil && !proto.Equal(want, got) {
		t.Fatalf("%x: protobuf-go %v, ours %v", b, want, got)
	}
}

// The server's codec writes a route reply as protobuf-go does, every
// field included (index_trust among them): setsEveryField fails when a
// field is added to RouteResponse and not set here.
func TestRouteCodecEncodesEveryRouteResponseField(t *testing.T) {
	res := &pb.RouteResponse{
		RequestId: "r", WorkerId: 3, DpRank: 1, OverlapBlocks: 4, CachedTokens: 64,
		PrefillWorker: &pb.WorkerRef{WorkerId: 5, DpRank: 2}, PrefillOverlapBlocks: 2, PrefillCachedTokens: 32,
		PrefillRequestId: "r-prefill", IndexTrust: "untrusted", ReceiptJson: `{"winner":"3/1"}`,
	}
	setsEveryField(t, res)
	bufs, err := newRouteCodec().Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var got pb.RouteResponse
	if err := proto.Unmarshal(bufs.Materialize(), &got); err != nil || !proto.Equal(&got, res) {
		t.Fatalf("protobuf-go reads %v (%v), want %v", &got, err, res)
	}
}

func setsEveryField(t *testing.T, m proto.Message) {
	t.Helper()
	set := 0
	m.ProtoReflect().Range(func(protoreflect.FieldDescriptor, protoreflect.Value) bool { set++; return true })
	if want := m.ProtoReflect().Descriptor().Fields().Len(); set != want {
		t.Fatalf("%s: %d of %d fields set", m.ProtoReflect().Descriptor().Name(), set, want)
	}
}
