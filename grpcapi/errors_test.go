package grpcapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// postJSON calls the HTTP API and returns the status and "error".
func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out.Error
}

// The same input gets the same message over both APIs, with the HTTP
// status and the gRPC code routeapi pairs.
func TestErrorsMatchHTTP(t *testing.T) {
	e := newEnv(t, envOptions{workers: 1})
	ctx := context.Background()
	if _, err := e.client.Route(ctx, &pb.RouteRequest{RequestId: "dup", TokenIds: prompt(8, 1)}); err != nil {
		t.Fatal(err)
	}
	nan := math.NaN()
	for _, tt := range []struct {
		name     string
		path     string
		body     string
		call     func() error
		httpCode int
		code     codes.Code
	}{
		{"empty prompt", "/route", `{"token_ids":[]}`, func() error {
			_, err := e.client.Route(ctx, &pb.RouteRequest{})
			return err
		}, 400, codes.InvalidArgument},
		{"override out of range", "/route", `{"token_ids":[1],"router_config_override":{"overlap_score_credit":2}}`, func() error {
			_, err := e.client.Route(ctx, &pb.RouteRequest{TokenIds: []uint32{1},
				RouterConfigOverride: &pb.ConfigOverride{OverlapScoreCredit: new(2.0)}})
			return err
		}, 400, codes.InvalidArgument},
		{"NaN override", "/route", `{"token_ids":[1],"router_config_override":{"router_temperature":-1}}`, func() error {
			// JSON has no NaN; both are out of range with the same text.
			_, err := e.client.Route(ctx, &pb.RouteRequest{TokenIds: []uint32{1},
				RouterConfigOverride: &pb.ConfigOverride{RouterTemperature: &nan}})
			return err
		}, 400, codes.InvalidArgument},
		{"shared cache multiplier out of range", "/route", `{"token_ids":[1],"router_config_override":{"shared_cache_multiplier":-1}}`, func() error {
			_, err := e.client.Route(ctx, &pb.RouteRequest{TokenIds: []uint32{1},
				RouterConfigOverride: &pb.ConfigOverride{SharedCacheMultiplier: new(-1.0)}})
			return err
		}, 400, codes.InvalidArgument},
		{"request id already active", "/route", `{"request_id":"dup","token_ids":[1]}`, func() error {
			_, err := e.client.Route(ctx, &pb.RouteRequest{RequestId: "dup", TokenIds: []uint32{1}})
			return err
		}, 400, codes.InvalidArgument},
		{"unknown pinned worker", "/route", `{"token_ids":[1],"pinned_worker":{"worker_id":9,"dp_rank":0}}`, func() error {
			_, err := e.client.Route(ctx, &pb.RouteRequest{TokenIds: []uint32{1}, PinnedWorker: &pb.WorkerRef{WorkerId: 9}})
			return err
		}, 503, codes.Unavailable},
		{"free of an unknown request", "/free", `{"request_id":"nobody"}`, func() error {
			return e.client.Free(ctx, "nobody")
		}, 404, codes.NotFound},
		{"prefill done of an unknown request", "/prefill_done", `{"request_id":"nobody"}`, func() error {
			return e.client.PrefillDone(ctx, "nobody")
		}, 404, codes.NotFound},
		{"free without id", "/free", `{}`, func() error {
			return e.client.Free(ctx, "")
		}, 400, codes.InvalidArgument},
		{"overlap scores without tokens", "/overlap_scores", `{"token_ids":[]}`, func() error {
			_, err := e.client.OverlapScores(ctx, nil, "")
			return err
		}, 400, codes.InvalidArgument},
		{"potential loads without tokens", "/potential_loads", `{}`, func() error {
			_, err := e.client.PotentialLoads(ctx, nil, "")
			return err
		}, 400, codes.InvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			httpCode, httpMsg := postJSON(t, e.httpURL+tt.path, tt.body)
			err := tt.call()
			st := status.Convert(err)
			if httpCode != tt.httpCode || st.Code() != tt.code {
				t.Fatalf("HTTP %d %q, gRPC %v %q; want HTTP %d and %v", httpCode, httpMsg, st.Code(), st.Message(), tt.httpCode, tt.code)
			}
			if tt.name == "NaN override" {
				httpMsg = "router_config_override.router_temperature is out of range"
			}
			if httpMsg == "" || st.Message() != httpMsg {
				t.Fatalf("messages differ: HTTP %q, gRPC %q", httpMsg, st.Message())
			}
		})
	}
}

// A router that stopped answers UNAVAILABLE "router is shutting down", as
// HTTP answers 503 with that text.
func TestStoppedRouter(t *testing.T) {
	e := newEnv(t, envOptions{workers: 1})
	e.router.Stop()
	code, msg := postJSON(t, e.httpURL+"/route", `{"token_ids":[1]}`)
	_, err := e.client.Route(context.Background(), &pb.RouteRequest{TokenIds: []uint32{1}})
	if st := status.Convert(err); code != 503 || st.Code() != codes.Unavailable || st.Message() != msg {
		t.Fatalf("HTTP %d %q, gRPC %v %q", code, msg, st.Code(), st.Message())
	}
}
