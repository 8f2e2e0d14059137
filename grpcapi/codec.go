package grpcapi

import (
	"fmt"
	"math"
	"sync"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec this one delegates to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/internal/tokenwire"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// routeCodec is the server's codec: protobuf, with the packed token ids
// of a RouteRequest (alone or in a Lifecycle stream's route call) and of a
// TokensRequest (OverlapScores, PotentialLoads) decoded
// by tokenwire into a recycled buffer (protobuf-go's generic packed
// decoding cost as much per prompt as the JSON API's hand-written token
// parser). Everything else, including a RouteRequest's other fields, goes
// through protobuf-go.
type routeCodec struct{ proto encoding.CodecV2 }

func newRouteCodec() routeCodec { return routeCodec{proto: encoding.GetCodecV2("proto")} }

func (c routeCodec) Name() string { return "proto" }

func (c routeCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

// Unmarshal decodes data into v. A kvrouter.v1 message that does not
// decode is reported to its receiver (decodeStatus: INVALID_ARGUMENT), not
// to grpc-go, which would answer INTERNAL.
func (c routeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.unmarshal(data, v)
	if err != nil && deferDecodeError(v, err) {
		return nil
	}
	return err
}

func (c routeCodec) unmarshal(data mem.BufferSlice, v any) error {
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		b = buf.ReadOnlyData()
	}
	switch m := v.(type) {
	case *pb.RouteRequest:
		return DecodeRouteRequest(b, m)
	case *pb.TokensRequest:
		return DecodeTokensRequest(b, m)
	case *pb.LifecycleRequest:
		return DecodeLifecycleRequest(b, m)
	}
	return c.proto.Unmarshal(data, v)
}

// tokenPool recycles token buffers between route calls (handed back by
// recycleTokens once the router answered).
var tokenPool = sync.Pool{New: func() any { return new([]uint32) }}

// maxPooledTokens keeps one huge prompt from pinning a huge buffer.
const maxPooledTokens = 1 << 17

func recycleTokens(t []uint32) {
	if cap(t) == 0 || cap(t) > maxPooledTokens {
		return
	}
	t = t[:0]
	tokenPool.Put(&t)
}

// DecodeRouteRequest decodes b into m as proto.Unmarshal does (fields
// merge, repeated token ids append, packed or not), except that a token
// id wider than 32 bits is refused (tokenwire.ErrWide) where protobuf
// would truncate it to another token, as the JSON API refuses it; the ids
// in a buffer from tokenPool.
func DecodeRouteRequest(b []byte, m *pb.RouteRequest) error {
	return decodeWithTokens(b, m, pb.RouteRequestTokenIDsField, "route request",
		func() []uint32 { return m.TokenIds }, func(t []uint32) { m.TokenIds = t })
}

// DecodeTokensRequest is DecodeRouteRequest for OverlapScores' and
// PotentialLoads' TokensRequest.
func DecodeTokensRequest(b []byte, m *pb.TokensRequest) error {
	return decodeWithTokens(b, m, pb.TokensRequestTokenIDsField, "tokens request",
		func() []uint32 { return m.TokenIds }, func(t []uint32) { m.TokenIds = t })
}

// decodeWithTokens decodes b into m as proto.Unmarshal does, with field
// num (m's token ids: get and set read and write it) gathered by
// tokenwire into a pooled buffer and every other field by protobuf-go.
func decodeWithTokens(b []byte, m proto.Message, num protowire.Number, what string, get func() []uint32, set func([]uint32)) error {
	var rest []byte // the other fields, for protobuf-go
	tp := tokenPool.Get().(*[]uint32)
	tokens := (*tp)[:0]
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return fmt.Errorf("%s: %w", what, protowire.ParseError(k))
		}
		if n == num && typ == protowire.BytesType {
			packed, l := protowire.ConsumeBytes(b[k:])
			if l < 0 {
				return fmt.Errorf("%s: token_ids: %w", what, protowire.ParseError(l))
			}
			var err error
			if tokens, err = tokenwire.AppendDecodedStrict(tokens, packed); err != nil {
				return err
			}
			b = b[k+l:]
			continue
		}
		if n == num && typ == protowire.VarintType {
			v, l := protowire.ConsumeVarint(b[k:])
			if l < 0 {
				return tokenwire.ErrMalformed
			}
			if v > math.MaxUint32 {
				return tokenwire.ErrWide
			}
			tokens = append(tokens, uint32(v))
			b = b[k+l:]
			continue
		}
		l := protowire.ConsumeFieldValue(n, typ, b[k:])
		if l < 0 {
			return fmt.Errorf("%s: field %d: %w", what, n, protowire.ParseError(l))
		}
		rest = append(rest, b[:k+l]...)
		b = b[k+l:]
	}
	if len(rest) > 0 {
		if err := proto.Unmarshal(rest, m); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if had := get(); len(had) > 0 {
		set(append(had, tokens...)) // merged into a message that had ids
	} else {
		set(tokens)
	}
	return nil
}

// DecodeLifecycleRequest decodes b into m as proto.Unmarshal does. The
// shape a client sends for a route call (an id and a route, each once)
// decodes the route with DecodeRouteRequest; any other message (free,
// prefill done, repeated or unknown fields) goes to protobuf-go whole.
func DecodeLifecycleRequest(b []byte, m *pb.LifecycleRequest) error {
	var (
		id          uint64
		route       []byte
		seenID, has bool
	)
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return unmarshalLifecycle(b, m)
		}
		switch {
		case num == pb.LifecycleRequestIDField && typ == protowire.VarintType && !seenID:
			v, k := protowire.ConsumeVarint(rest[n:])
			if k < 0 {
				return unmarshalLifecycle(b, m)
			}
			id, seenID = v, true
			rest = rest[n+k:]
		case num == pb.LifecycleRequestRouteField && typ == protowire.BytesType && !has:
			v, k := protowire.ConsumeBytes(rest[n:])
			if k < 0 {
				return unmarshalLifecycle(b, m)
			}
			route, has = v, true
			rest = rest[n+k:]
		default:
			return unmarshalLifecycle(b, m)
		}
	}
	if !has {
		return unmarshalLifecycle(b, m)
	}
	r := new(pb.RouteRequest)
	if err := DecodeRouteRequest(route, r); err != nil {
		return fmt.Errorf("lifecycle request: %w", err)
	}
	m.Reset()
	m.Id = id
	m.Call = &pb.LifecycleRequest_Route{Route: r}
	return nil
}

func unmarshalLifecycle(b []byte, m *pb.LifecycleRequest) error {
	if err := checkLifecycleWidth(b); err != nil {
		return fmt.Errorf("lifecycle request: route: %w", err)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("lifecycle request: %w", err)
	}
	return nil
}

// checkLifecycleWidth refuses (tokenwire.ErrWide) a Lifecycle message
// whose route calls carry a token id wider than 32 bits: the shapes that
// go to protobuf-go whole would have it truncated. A malformed message is
// left for protobuf-go to report.
func checkLifecycleWidth(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		l := protowire.ConsumeFieldValue(num, typ, b[n:])
		if l < 0 {
			return nil
		}
		if num == pb.LifecycleRequestRouteField && typ == protowire.BytesType {
			route, _ := protowire.ConsumeBytes(b[n:])
			if err := checkTokenWidth(route, pb.RouteRequestTokenIDsField); err != nil {
				return err
			}
		}
		b = b[n+l:]
	}
	return nil
}

// checkTokenWidth refuses a message whose field num (packed or not) holds
// a varint wider than 32 bits.
func checkTokenWidth(b []byte, num protowire.Number) error {
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return nil
		}
		l := protowire.ConsumeFieldValue(n, typ, b[k:])
		if l < 0 {
			return nil
		}
		if n == num {
			vals := b[k : k+l]
			if typ == protowire.BytesType {
				vals, _ = protowire.ConsumeBytes(vals)
			}
			if typ == protowire.BytesType || typ == protowire.VarintType {
				for len(vals) > 0 {
					v, m := protowire.ConsumeVarint(vals)
					if m < 0 {
						break
					}
					if v > math.MaxUint32 {
						return tokenwire.ErrWide
					}
					vals = vals[m:]
				}
			}
		}
		b = b[k+l:]
	}
	return nil
}
