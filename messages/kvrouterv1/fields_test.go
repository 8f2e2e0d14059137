package kvrouterv1

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func TestFieldNumbersMatchTheProto(t *testing.T) {
	for _, tc := range []struct {
		msg   proto.Message
		field protoreflect.Name
		got   protowire.Number
	}{
		{&RouteRequest{}, "token_ids", RouteRequestTokenIDsField},
		{&TokensRequest{}, "token_ids", TokensRequestTokenIDsField},
		{&LifecycleRequest{}, "id", LifecycleRequestIDField},
		{&LifecycleRequest{}, "route", LifecycleRequestRouteField},
	} {
		fd := tc.msg.ProtoReflect().Descriptor().Fields().ByName(tc.field)
		if fd == nil || fd.Number() != tc.got {
			t.Errorf("%s.%s: constant %d, descriptor %v", tc.msg.ProtoReflect().Descriptor().Name(), tc.field, tc.got, fd)
		}
	}
}
