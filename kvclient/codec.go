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

// clientCodec is protobuf, with a prompt's token ids (a route call, unary
// or on a Lifecycle stream, and the OverlapScores and PotentialLoads
// queries) encoded by tokenwire: protobuf-go's generic packed encoding
// was most of a client's CPU per 4k-token route. The bytes are
// what protobuf-go writes, with token_ids last instead of in field order
// (which protobuf readers accept: fields may come in any order).
type clientCodec struct{ proto encoding.CodecV2 }

func newClientCodec() clientCodec { return clientCodec{proto: encoding.GetCodecV2("proto")} }

func (c clientCodec) Name() string { return "proto" }

func (c clientCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c clientCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *pb.RouteRequest:
		return encodeWithTokens(m, pb.RouteRequestTokenIDsField, m.GetTokenIds(), false, 0)
	case *pb.TokensRequest:
		return encodeWithTokens(m, pb.TokensRequestTokenIDsField, m.GetTokenIds(), false, 0)
	case *pb.LifecycleRequest:
		if r := m.GetRoute(); r != nil && len(m.ProtoReflect().GetUnknown()) == 0 {
			return encodeWithTokens(r, pb.RouteRequestTokenIDsField, r.GetTokenIds(), true, m.GetId())
		}
	}
	return c.proto.Marshal(v)
}

// encodeWithTokens encodes m, whose token ids ids are field num, alone or
// (a route) as LifecycleRequest{id, route: m}, into one buffer of grpc's
// pool (freed once sent): m's other fields by protobuf-go, then ids by
// tokenwire.
func encodeWithTokens(m proto.Message, num protowire.Number, ids []uint32, inLifecycle bool, id uint64) (mem.BufferSlice, error) {
	rest := without(m, num)
	payload := tokenwire.Size(ids)
	inner := proto.Size(rest) + tokenwire.FieldSize(num, payload)
	size := inner
	if inLifecycle {
		size = protowire.SizeTag(pb.LifecycleRequestRouteField) + protowire.SizeBytes(inner)
		if id != 0 {
			size += protowire.SizeTag(pb.LifecycleRequestIDField) + protowire.SizeVarint(id)
		}
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	b := (*buf)[:0]
	if inLifecycle {
		if id != 0 {
			b = protowire.AppendTag(b, pb.LifecycleRequestIDField, protowire.VarintType)
			b = protowire.AppendVarint(b, id)
		}
		b = protowire.AppendTag(b, pb.LifecycleRequestRouteField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(inner))
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(b, rest)
	if err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("kvclient: %s: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	*buf = tokenwire.AppendFieldSized(b, num, ids, payload)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// without is m without field num: every other field (sharing m's values,
// which marshalling only reads) and m's unknown fields. It is built by
// reflection so that a field added to the message is sent without a
// change here.
func without(m proto.Message, num protowire.Number) proto.Message {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() != num {
			dst.Set(fd, v)
		}
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
	return dst.Interface()
}
