package grpcapi_test

import (
	"context"
	"encoding/json"
	"testing"

	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// explain returns the decision's route receipt in receipt_json; without
// it the field stays empty.
func TestRouteExplain(t *testing.T) {
	e := newEnv(t, envOptions{workers: 2})
	ctx := context.Background()
	res, err := e.client.Route(ctx, &pb.RouteRequest{RequestId: "x1", TokenIds: []uint32{1, 2, 3}, Model: "m", Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	var rc struct {
		RequestID  string            `json:"request_id"`
		Candidates []json.RawMessage `json:"candidates"`
		Winner     string            `json:"winner"`
	}
	if err := json.Unmarshal([]byte(res.ReceiptJson), &rc); err != nil || rc.RequestID != "x1" || len(rc.Candidates) != 2 || rc.Winner == "" {
		t.Fatalf("receipt_json %q (%v)", res.ReceiptJson, err)
	}
	res, err = e.client.Route(ctx, &pb.RouteRequest{RequestId: "x2", TokenIds: []uint32{1, 2, 3}})
	if err != nil || res.ReceiptJson != "" {
		t.Fatalf("an unexplained route: %q, %v", res.GetReceiptJson(), err)
	}
}
