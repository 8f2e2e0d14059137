package grpcapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/kv"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
)

// A route reply names the chosen rank's index trust, over a call and over
// a Lifecycle stream, as HTTP's /route does: exact for a healthy rank,
// untrusted for a rank whose replay failed (docs/index-trust.md).
func TestRouteReplyNamesIndexTrust(t *testing.T) {
	e := newEnv(t, envOptions{workers: 2})
	ctx := context.Background()
	s, err := e.client.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(ctx) })
	w1 := kv.WorkerWithDpRank{WorkerID: 1}
	e.router.ReplayFailed(w1, "test")
	testutil.Eventually(t, 5*time.Second, "worker 1 untrusted", func() bool { return e.router.IndexTrust(w1).State == "untrusted" })

	for _, tc := range []struct {
		worker uint64
		want   string
	}{{1, "untrusted"}, {2, "exact"}} {
		req := &pb.RouteRequest{TokenIds: prompt(64, 1), UpdateStates: new(false), PinnedWorker: &pb.WorkerRef{WorkerId: tc.worker}}
		res, err := e.client.Route(ctx, req)
		if err != nil || res.WorkerId != tc.worker || res.IndexTrust != tc.want {
			t.Errorf("route pinned to worker %d: %v (%v), want index_trust %q", tc.worker, res, err, tc.want)
		}
		res, err = s.Route(ctx, req)
		if err != nil || res.WorkerId != tc.worker || res.IndexTrust != tc.want {
			t.Errorf("stream route pinned to worker %d: %v (%v), want index_trust %q", tc.worker, res, err, tc.want)
		}
		if got := httpRouteTrust(t, e.httpURL, tc.worker); got != tc.want {
			t.Errorf("HTTP /route pinned to worker %d: index_trust %q, want %q as over gRPC", tc.worker, got, tc.want)
		}
	}
}

// httpRouteTrust is the index_trust of HTTP /route's answer for a prompt
// pinned to worker.
func httpRouteTrust(t *testing.T, url string, worker uint64) string {
	t.Helper()
	body := fmt.Sprintf(`{"token_ids":%s,"update_states":false,"pinned_worker":{"worker_id":%d}}`, tokensJSON(prompt(64, 1)), worker)
	resp, err := http.Post(url+"/route", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		WorkerID   uint64 `json:"worker_id"`
		IndexTrust string `json:"index_trust"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.WorkerID != worker {
		t.Fatalf("HTTP /route: %d %+v (%v)", resp.StatusCode, out, err)
	}
	return out.IndexTrust
}

func tokensJSON(ids []uint32) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

// The Workers call shows each rank's index trust as GET /workers does:
// state, reason, detail and since, and the transition counts.
func TestWorkersShowIndexTrust(t *testing.T) {
	e := newEnv(t, envOptions{workers: 2})
	ctx := context.Background()
	w1 := kv.WorkerWithDpRank{WorkerID: 1}
	e.router.ReplayFailed(w1, "replay_error")
	testutil.Eventually(t, 5*time.Second, "worker 1 untrusted", func() bool { return e.router.IndexTrust(w1).State == "untrusted" })

	res, err := e.client.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var httpStatus struct {
		Workers []struct {
			WorkerID uint64 `json:"worker_id"`
			Ranks    []struct {
				DpRank     uint32 `json:"dp_rank"`
				IndexTrust struct {
					State         string `json:"state"`
					Reason        string `json:"reason"`
					Detail        string `json:"detail"`
					SinceUnixNano int64  `json:"since_unix_nano"`
				} `json:"index_trust"`
			} `json:"ranks"`
		} `json:"workers"`
		Transitions map[string]uint64 `json:"index_trust_transitions"`
	}
	resp, err := http.Get(e.httpURL + "/workers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&httpStatus); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{}
	for _, w := range httpStatus.Workers {
		for _, r := range w.Ranks {
			tr := r.IndexTrust
			want[w.WorkerID] = fmt.Sprintf("%s/%s/%s/%d", tr.State, tr.Reason, tr.Detail, tr.SinceUnixNano)
		}
	}
	got := map[uint64]string{}
	for _, w := range res.Workers {
		for _, r := range w.Ranks {
			tr := r.GetIndexTrust()
			if tr == nil {
				t.Fatalf("worker %d rank %d: no index_trust", w.WorkerId, r.DpRank)
			}
			got[w.WorkerId] = fmt.Sprintf("%s/%s/%s/%d", tr.State, tr.Reason, tr.Detail, tr.SinceUnixNano)
		}
	}
	if len(got) != 2 || !strings.HasPrefix(got[1], "untrusted/replay_failed/") || !strings.HasPrefix(got[2], "exact/") {
		t.Fatalf("gRPC Workers index trust %v", got)
	}
	for id, g := range got {
		if want[id] != g {
			t.Errorf("worker %d: gRPC %q, HTTP %q", id, g, want[id])
		}
	}
	if res.IndexTrustTransitions["untrusted/replay_failed"] != 1 || !maps.Equal(res.IndexTrustTransitions, httpStatus.Transitions) {
		t.Errorf("transitions: gRPC %v, HTTP %v", res.IndexTrustTransitions, httpStatus.Transitions)
	}
}
