package grpcapi

import (
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec this one delegates to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// routeCodec is the server's codec: protobuf, with a RouteRequest's
// packed token ids decoded by a tight loop into a recycled buffer
// (protobuf-go's generic packed decoding cost as much per prompt as the
// JSON API's hand-written token parser). Everything else, including a
// RouteRequest's other fields, goes through protobuf-go.
type routeCodec struct{ proto encoding.CodecV2 }

func newRouteCodec() routeCodec { return routeCodec{proto: encoding.GetCodecV2("proto")} }

func (c routeCodec) Name() string { return "proto" }

func (c routeCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c routeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*pb.RouteRequest)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		b = buf.ReadOnlyData()
	}
	return DecodeRouteRequest(b, m)
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

var errTokenVarint = errors.New("token_ids: malformed varint")

// DecodeRouteRequest decodes b into m as proto.Unmarshal does (fields
// merge, repeated token ids append, packed or not, a varint wider than
// 32 bits is truncated as protobuf does for uint32), with the token ids
// in a buffer from tokenPool.
func DecodeRouteRequest(b []byte, m *pb.RouteRequest) error {
	var rest []byte // the other fields, for protobuf-go
	tp := tokenPool.Get().(*[]uint32)
	tokens := (*tp)[:0]
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("route request: %w", protowire.ParseError(n))
		}
		if num == 2 && typ == protowire.BytesType {
			packed, k := protowire.ConsumeBytes(b[n:])
			if k < 0 {
				return fmt.Errorf("route request: token_ids: %w", protowire.ParseError(k))
			}
			var err error
			if tokens, err = appendPacked(tokens, packed); err != nil {
				return err
			}
			b = b[n+k:]
			continue
		}
		if num == 2 && typ == protowire.VarintType {
			v, k := protowire.ConsumeVarint(b[n:])
			if k < 0 {
				return errTokenVarint
			}
			tokens = append(tokens, uint32(v))
			b = b[n+k:]
			continue
		}
		k := protowire.ConsumeFieldValue(num, typ, b[n:])
		if k < 0 {
			return fmt.Errorf("route request: field %d: %w", num, protowire.ParseError(k))
		}
		rest = append(rest, b[:n+k]...)
		b = b[n+k:]
	}
	if len(rest) > 0 {
		if err := proto.Unmarshal(rest, m); err != nil {
			return fmt.Errorf("route request: %w", err)
		}
	}
	if len(m.TokenIds) == 0 {
		m.TokenIds = tokens
	} else {
		m.TokenIds = append(m.TokenIds, tokens...) // merged into a message that had ids
	}
	return nil
}

// appendPacked appends packed varints; the count of bytes without the
// continuation bit is the count of values, so the slice grows once.
func appendPacked(dst []uint32, b []byte) ([]uint32, error) {
	count := 0
	for _, c := range b {
		if c < 0x80 {
			count++
		}
	}
	if need := len(dst) + count; cap(dst) < need {
		grown := make([]uint32, len(dst), need)
		copy(grown, dst)
		dst = grown
	}
	for i := 0; i < len(b); {
		c := b[i]
		if c < 0x80 { // one byte: most token ids below 128 and every continuation's end
			dst = append(dst, uint32(c))
			i++
			continue
		}
		v, k := protowire.ConsumeVarint(b[i:])
		if k < 0 {
			return nil, errTokenVarint
		}
		i += k
		dst = append(dst, uint32(v))
	}
	return dst, nil
}
