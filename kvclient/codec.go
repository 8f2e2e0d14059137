package kvclient

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec this one delegates to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kvrouter/kvrouter/internal/tokenwire"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// Field numbers of the prompt in RouteRequest and of the route call in
// LifecycleRequest (messages/kvrouterv1/router.proto).
const (
	tokenIDsField       protowire.Number = 2
	lifecycleIDField    protowire.Number = 1
	lifecycleRouteField protowire.Number = 2
)

// clientCodec is protobuf, with a route call's token ids (unary or on a
// Lifecycle stream) encoded by tokenwire: protobuf-go's generic packed
// encoding was most of a client's CPU per 4k-token route. The bytes are
// what protobuf-go writes, with token_ids last instead of in field order
// (which protobuf readers accept: fields may come in any order).
type clientCodec struct{ proto encoding.CodecV2 }

func newClientCodec() clientCodec { return clientCodec{proto: encoding.GetCodecV2("proto")} }

func (c clientCodec) Name() string { return "proto" }

func (c clientCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c clientCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *pb.RouteRequest:
		return encodeRoute(m, false, 0)
	case *pb.LifecycleRequest:
		if r := m.GetRoute(); r != nil && len(m.ProtoReflect().GetUnknown()) == 0 {
			return encodeRoute(r, true, m.GetId())
		}
	}
	return c.proto.Marshal(v)
}

// encodeRoute encodes r, alone or as LifecycleRequest{id, route: r}, into
// one buffer of grpc's pool (freed once sent): r's other fields by
// protobuf-go, then its token ids by tokenwire.
func encodeRoute(r *pb.RouteRequest, inLifecycle bool, id uint64) (mem.BufferSlice, error) {
	rest := withoutTokens(r)
	ids := r.GetTokenIds()
	payload := tokenwire.Size(ids)
	inner := proto.Size(rest) + tokenwire.FieldSize(tokenIDsField, payload)
	size := inner
	if inLifecycle {
		size = protowire.SizeTag(lifecycleRouteField) + protowire.SizeBytes(inner)
		if id != 0 {
			size += protowire.SizeTag(lifecycleIDField) + protowire.SizeVarint(id)
		}
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	b := (*buf)[:0]
	if inLifecycle {
		if id != 0 {
			b = protowire.AppendTag(b, lifecycleIDField, protowire.VarintType)
			b = protowire.AppendVarint(b, id)
		}
		b = protowire.AppendTag(b, lifecycleRouteField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(inner))
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(b, rest)
	if err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("kvclient: route request: %w", err)
	}
	*buf = tokenwire.AppendFieldSized(b, tokenIDsField, ids, payload)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// withoutTokens is r without token_ids: every other field (sharing r's
// values, which marshalling only reads) and r's unknown fields. It is
// built by reflection so that a field added to RouteRequest is sent
// without a change here.
func withoutTokens(r *pb.RouteRequest) *pb.RouteRequest {
	out := new(pb.RouteRequest)
	dst := out.ProtoReflect()
	src := r.ProtoReflect()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() != tokenIDsField {
			dst.Set(fd, v)
		}
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
	return out
}
