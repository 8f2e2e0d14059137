package bench

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// An encoded route decodes to the request a regular client would send.
func TestEncodedRouteDecodes(t *testing.T) {
	tokens := []uint32{0, 1, 127, 128, 1 << 20, 1<<32 - 1}
	e := NewEncodedRoute(tokens)
	for _, tt := range []struct {
		id     string
		update bool
	}{{"", false}, {"req-1", true}, {"", true}} {
		var got pb.RouteRequest
		if err := proto.Unmarshal(e.Append(nil, tt.id, tt.update), &got); err != nil {
			t.Fatal(err)
		}
		want := &pb.RouteRequest{RequestId: tt.id, TokenIds: tokens, UpdateStates: new(tt.update)}
		if !proto.Equal(&got, want) {
			t.Errorf("decoded %v, want %v", &got, want)
		}
	}
}
