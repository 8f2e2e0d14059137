package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
)

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	var out struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out.Error
}

// The router's own embedded NATS and memberlist ports (chosen at start)
// are refused as worker URLs, as its HTTP and gRPC listeners are; ranks
// past 2^32-1 and request ids with control, bidi or non-UTF-8 characters
// are 400s.
func TestOwnPortsAndBadIDsRefused(t *testing.T) {
	cfg := testConfig(t)
	cfg.ZMQEvents = false
	cfg.ClusterBind = "127.0.0.1:0"
	cfg.WorkerURLAllow = []string{"loopback"}
	r, err := Start(context.Background(), cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	base := "http://" + r.HTTPAddr()
	natsHost := strings.TrimPrefix(r.NATSURL(), "nats://")

	_, clusterPort, _ := net.SplitHostPort(r.ClusterAddr())
	for name, url := range map[string]string{
		"nats":       "http://" + natsHost,
		"memberlist": "http://127.0.0.1:" + clusterPort,
	} {
		code, msg := post(t, base+"/workers", `{"worker_id":1,"url":"`+url+`"}`)
		if code != http.StatusBadRequest || !strings.Contains(msg, "own listener") {
			t.Errorf("%s (%s): %d %q, want 400 naming the router's own listener", name, url, code, msg)
		}
	}
	// A port that is not the router's passes the same policy.
	if code, msg := post(t, base+"/workers", `{"worker_id":1,"url":"http://127.0.0.1:1"}`); code != http.StatusOK {
		t.Fatalf("a loopback worker: %d %q", code, msg)
	}
	code, msg := post(t, base+"/workers", `{"worker_id":2,"url":"http://127.0.0.1:2","data_parallel_start_rank":4294967295,"data_parallel_size":2}`)
	if code != http.StatusBadRequest || !strings.Contains(msg, "uint32") {
		t.Errorf("ranks past 2^32-1: %d %q, want 400", code, msg)
	}
	for name, id := range map[string]string{
		"NUL":         `a\u0000b`,
		"RLO":         `invoice\u202Etxt.exe`,
		"bad UTF-8":   "a\xffb",
		"lone surrog": `a\ud800b`,
	} {
		code, msg := post(t, base+"/route", `{"request_id":"`+id+`","token_ids":[1,2,3]}`)
		if code != http.StatusBadRequest || !strings.Contains(msg, "request_id") {
			t.Errorf("request_id with %s: %d %q, want 400", name, code, msg)
		}
		code, msg = post(t, base+"/free", `{"request_id":"`+id+`"}`)
		if code != http.StatusBadRequest || !strings.Contains(msg, "request_id") {
			t.Errorf("free with %s: %d %q, want 400", name, code, msg)
		}
	}
}
