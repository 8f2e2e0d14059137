package bench

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec rawCodec falls back to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// EncodedRoute is a RouteRequest whose prompt was encoded once: a load
// generator on the router's machine then pays per call what the JSON
// load pays (appending an id to pre-encoded bytes), not a fresh encode
// of 4k tokens, so the comparison is of the router's two APIs. The
// router decodes the same bytes a regular client sends.
type EncodedRoute struct {
	prompt []byte // field 2 (token_ids), packed
}

// NewEncodedRoute encodes tokens once.
func NewEncodedRoute(tokens []uint32) EncodedRoute {
	b, _ := proto.Marshal(&pb.RouteRequest{TokenIds: tokens}) // a message of scalars: cannot fail
	return EncodedRoute{prompt: b}
}

// Append appends the whole request (protobuf merges concatenated fields):
// request_id when non-empty, update_states always (it defaults to true).
func (e EncodedRoute) Append(dst []byte, requestID string, updateStates bool) []byte {
	dst = append(dst, e.prompt...)
	if requestID != "" {
		dst = protowire.AppendTag(dst, 1, protowire.BytesType)
		dst = protowire.AppendString(dst, requestID)
	}
	dst = protowire.AppendTag(dst, 4, protowire.VarintType)
	return protowire.AppendVarint(dst, protowire.EncodeBool(updateStates))
}

// RouteEncoded calls kvrouter.v1.Router/Route with an encoded request.
func RouteEncoded(ctx context.Context, conn *grpc.ClientConn, req []byte, res *pb.RouteResponse) error {
	raw := rawMessage(req)
	return conn.Invoke(ctx, pb.Router_Route_FullMethodName, &raw, res, grpc.ForceCodecV2(rawCodec{}))
}

type rawMessage []byte

// rawCodec sends a rawMessage as it is and everything else as protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawMessage); ok {
		return mem.BufferSlice{mem.SliceBuffer(*r)}, nil
	}
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

func (rawCodec) Name() string { return "proto" }
