package grpcapi_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/kvrouter/kvrouter/httpapi"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kvclient"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
	"github.com/kvrouter/kvrouter/routeapi"
)

const (
	apiToken   = "api-token-0123456789abcdef"
	adminToken = "admin-token-0123456789abcdef"
)

// The client token is enforced on every call but health checks, with
// HTTP's messages; an admin token is accepted too.
func TestAuth(t *testing.T) {
	e := newEnv(t, envOptions{workers: 1, tokens: httpapi.StaticTokens(apiToken), adminTokens: httpapi.StaticTokens(adminToken)})
	ctx := context.Background()
	dial := func(tok string) *kvclient.Client {
		c, err := kvclient.Dial(e.addr, kvclient.Options{Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	route := &pb.RouteRequest{TokenIds: []uint32{1}, UpdateStates: new(false)}
	for _, tt := range []struct {
		token string
		code  codes.Code
		msg   string
	}{
		{"", codes.Unauthenticated, routeapi.MsgTokenMissing},
		{"wrong-token-0123456789abcdef", codes.Unauthenticated, routeapi.MsgTokenInvalid},
		{apiToken, codes.OK, ""},
		{adminToken, codes.OK, ""},
	} {
		c := dial(tt.token)
		_, err := c.Route(ctx, route)
		if st := status.Convert(err); st.Code() != tt.code || st.Message() != tt.msg {
			t.Errorf("token %q: route %v %q, want %v %q", tt.token, st.Code(), st.Message(), tt.code, tt.msg)
		}
		s, err := c.OpenStream(ctx)
		if err == nil {
			_, err = s.Route(ctx, route)
			_ = s.Close(ctx)
		}
		if st := status.Convert(err); st.Code() != tt.code {
			t.Errorf("token %q: stream route %v %q, want %v", tt.token, st.Code(), st.Message(), tt.code)
		}
		// Health checks are open (probes); reflection is data plane.
		if _, err := healthpb.NewHealthClient(c.Conn()).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("token %q: health check: %v", tt.token, err)
		}
		rs, err := reflectionpb.NewServerReflectionClient(c.Conn()).ServerReflectionInfo(ctx)
		if err == nil {
			// Send says io.EOF when the server already ended the stream
			// (refused it); Recv has the status.
			if err = rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err == nil || errors.Is(err, io.EOF) {
				_, err = rs.Recv()
			}
		}
		if status.Code(err) != tt.code {
			t.Errorf("token %q: reflection %v, want %v", tt.token, err, tt.code)
		}
	}
	// The HTTP API refuses the same way.
	if code, msg := postJSON(t, e.httpURL+"/route", `{"token_ids":[1],"update_states":false}`); code != 401 || msg != routeapi.MsgTokenMissing {
		t.Errorf("HTTP without a token: %d %q", code, msg)
	}
}

// Reflection lists the routing service and health.
func TestReflection(t *testing.T) {
	e := newEnv(t, envOptions{})
	rs, err := reflectionpb.NewServerReflectionClient(e.client.Conn()).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	res, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range res.GetListServicesResponse().GetService() {
		names[s.Name] = true
	}
	if !names["kvrouter.v1.Router"] || !names["grpc.health.v1.Health"] {
		t.Fatalf("reflection lists %v", names)
	}
}

// The health service follows the replica's readiness.
func TestHealthFollowsReadiness(t *testing.T) {
	var notReady atomic.Bool
	notReady.Store(true)
	e := newEnv(t, envOptions{ready: func() error {
		if notReady.Load() {
			return errors.New("warming up")
		}
		return nil
	}})
	h := healthpb.NewHealthClient(e.client.Conn())
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		res, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return res.Status
	}
	for _, svc := range []string{"", "kvrouter.v1.Router"} {
		if got := check(svc); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("%q while not ready: %v", svc, got)
		}
	}
	notReady.Store(false)
	testutil.Eventually(t, 5*time.Second, "SERVING once ready", func() bool {
		return check("kvrouter.v1.Router") == healthpb.HealthCheckResponse_SERVING && check("") == healthpb.HealthCheckResponse_SERVING
	})
	if _, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown service: %v", err)
	}
}
