package routeapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/kvrouter/kvrouter/actors"
)

func TestClassify(t *testing.T) {
	overloaded := &actors.RouteError{Kind: actors.ErrOverloaded, Message: "all workers busy", QueueDepth: 7, QueueLimit: 8}
	for _, tt := range []struct {
		err    error
		status int
		code   codes.Code
		msg    string
	}{
		{overloaded, 429, codes.ResourceExhausted, "all workers busy"},
		{fmt.Errorf("route: %w", actors.ErrNoEligibleWorker), 503, codes.Unavailable, "route: " + actors.ErrNoEligibleWorker.Error()},
		{&actors.RouteError{Kind: actors.ErrUnknownRequest, Message: `request "x" is not active`}, 404, codes.NotFound, `request "x" is not active`},
		{fmt.Errorf("%w: dup", actors.ErrBadRequest), 400, codes.InvalidArgument, "bad request: dup"},
		{fmt.Errorf("%w: registry full", actors.ErrLimit), 429, codes.ResourceExhausted, actors.ErrLimit.Error() + ": registry full"},
		{actors.ErrTimeout, 504, codes.DeadlineExceeded, actors.ErrTimeout.Error()},
		{fmt.Errorf("route: %w", context.DeadlineExceeded), 504, codes.DeadlineExceeded, "route: context deadline exceeded"},
		{fmt.Errorf("route: client left: %w", context.Canceled), 499, codes.Canceled, "client closed the request"},
		{actors.ErrStopped, 503, codes.Unavailable, "router is shutting down"},
		{errors.New("boom"), 500, codes.Internal, "boom"},
	} {
		f := Classify(tt.err)
		if f.HTTPStatus != tt.status || f.Code != tt.code || f.Message != tt.msg {
			t.Errorf("%v: got %d %v %q, want %d %v %q", tt.err, f.HTTPStatus, f.Code, f.Message, tt.status, tt.code, tt.msg)
		}
		if (tt.status == 500) != f.Unexpected {
			t.Errorf("%v: unexpected=%v", tt.err, f.Unexpected)
		}
	}
	if f := Classify(overloaded); f.Queue == nil || f.Queue.Depth != 7 || f.Queue.Limit != 8 {
		t.Errorf("queue figures: %+v", f.Queue)
	}
}

func TestRouteMessage(t *testing.T) {
	if _, err := RouteMessage(Route{}); err == nil || err.Error() != MsgTokensRequired {
		t.Errorf("no tokens: %v", err)
	}
	if _, err := RouteMessage(Route{HasTokens: true}); err == nil || err.Error() != MsgTokensEmpty {
		t.Errorf("empty tokens: %v", err)
	}
	m, err := RouteMessage(Route{HasTokens: true, Tokens: []uint32{1}})
	if err != nil || !m.UpdateStates || len(m.RequestId) != 28 {
		t.Errorf("default: %v %v", m, err)
	}
	m, err = RouteMessage(Route{HasTokens: true, Tokens: []uint32{1}, UpdateStates: new(false)})
	if err != nil || m.UpdateStates || m.RequestId != "" {
		t.Errorf("query only: %v %v", m, err)
	}
}
