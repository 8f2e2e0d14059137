package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/internal/testutil"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/metrics"
)

func newTestServer(t testing.TB, workers int) (*Server, *actors.Router) {
	t.Helper()
	cfg := actors.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Shards = 2
	r, err := actors.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	for i := 1; i <= workers; i++ {
		if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: uint64(i), DataParallelSize: 1}, true); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "workers registered", func() bool {
		reg, err := r.Registry(context.Background())
		return err == nil && len(reg.Workers) == workers
	})
	return New(Options{Router: r, Metrics: metrics.New(), MigrationLimit: 3, BlockSize: cfg.BlockSize, MaxBodyBytes: 1 << 20,
		Log: slog.New(slog.DiscardHandler)}), r
}

func do(t testing.TB, s *Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, localRequest(method, path, body))
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

// localRequest is a request from a loopback client (httptest's default
// remote address is not one, and admin routes answer loopback clients
// only when no admin token or listener is configured).
func localRequest(method, path, body string) *http.Request {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = "127.0.0.1:40000"
	return req
}

func TestRouteAPI(t *testing.T) {
	s, _ := newTestServer(t, 2)
	code, out := do(t, s, "POST", "/route", `{"request_id":"r1","token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}`)
	if code != 200 || out["request_id"] != "r1" || out["overlap_blocks"] != 0.0 {
		t.Fatalf("route: %d %v", code, out)
	}
	// The same call again (its client lost the answer) gets the same rank.
	if code, again := do(t, s, "POST", "/route", `{"request_id":"r1","token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}`); code != 200 ||
		out["worker_id"] == nil || fmt.Sprint(again) != fmt.Sprint(out) {
		t.Fatalf("retried route: %d %v, first %v", code, again, out)
	}
	if code, out = do(t, s, "POST", "/route", `{"token_ids":[1,2]}`); code != 200 || !strings.HasPrefix(out["request_id"].(string), "kvr-") {
		t.Fatalf("generated id: %d %v", code, out)
	}
	if code, _ = do(t, s, "POST", "/route", `{"token_ids":[1,2],"update_states":false}`); code != 200 {
		t.Fatalf("query-only: %d", code)
	}
	for _, tt := range []struct {
		path, body string
		code       int
	}{
		{"/route", `{"request_id":"r1","token_ids":[1]}`, 400}, // already active
		{"/route", `{"token_ids":[1],"pinned_worker":{"worker_id":9,"dp_rank":0}}`, 503},
		{"/route", `{"token_ids":[1],"router_config_override":{"overlap_score_credit":2}}`, 400},
		{"/prefill_done", `{"request_id":"r1"}`, 200},
		{"/free", `{"request_id":"r1"}`, 200},
		{"/free", `{"request_id":"r1"}`, 404},
		{"/free", `{}`, 400},
		{"/overlap_scores", `{"token_ids":[1,2,3]}`, 200},
		{"/potential_loads", `{"token_ids":[1,2,3]}`, 200},
		{"/nope", `{}`, 404},
	} {
		code, out := do(t, s, "POST", tt.path, tt.body)
		if code != tt.code {
			t.Errorf("POST %s %s: %d %v, want %d", tt.path, tt.body, code, out, tt.code)
		}
		if code >= 400 && out["error"] == nil {
			t.Errorf("POST %s %s: error body without \"error\": %v", tt.path, tt.body, out)
		}
	}
}

func TestWorkersAPI(t *testing.T) {
	s, r := newTestServer(t, 0)
	if code, out := do(t, s, "POST", "/workers", `{"worker_id":5,"url":"http://10.0.0.5:8000","data_parallel_size":2,"block_size":16}`); code != 200 {
		t.Fatalf("add: %d %v", code, out)
	}
	if code, out := do(t, s, "POST", "/workers", `{"worker_id":6,"block_size":32}`); code != 400 || !strings.Contains(out["error"].(string), "block_size") {
		t.Fatalf("block size mismatch: %d %v", code, out)
	}
	if code, _ := do(t, s, "POST", "/workers", `{"worker_id":6,"data_parallel_size":0}`); code != 400 {
		t.Fatalf("dp size 0: %d", code)
	}
	var st actors.Status
	deadline := time.Now().Add(3 * time.Second)
	for len(st.Workers) == 0 && time.Now().Before(deadline) {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, localRequest("GET", "/workers", ""))
		_ = json.Unmarshal(rec.Body.Bytes(), &st)
	}
	if len(st.Workers) != 1 || len(st.Workers[0].Ranks) != 2 || st.Workers[0].URL != "http://10.0.0.5:8000" {
		t.Fatalf("workers: %+v", st)
	}
	if code, _ := do(t, s, "DELETE", "/workers/5", ""); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := do(t, s, "DELETE", "/workers/5", ""); code != 404 {
		t.Fatalf("delete again: %d", code)
	}
	if code, _ := do(t, s, "DELETE", "/workers/abc", ""); code != 400 {
		t.Fatalf("delete abc: %d", code)
	}
	_ = r
}

// FuzzHandlers feeds arbitrary bodies to every JSON endpoint: the answer
// is always a 2xx or a 4xx/503 with a JSON body, never a 500 or a panic.
func FuzzHandlers(f *testing.F) {
	s, _ := newTestServer(f, 2)
	for _, seed := range []string{`{"token_ids":[1,2,3]}`, `{"request_id":"x","token_ids":[1]}`, `{"token_ids":[1],"pinned_worker":{"worker_id":1}}`,
		`{"worker_id":3,"url":"u"}`, `{"request_id":"x"}`, `{"prompt":[1,2],"max_tokens":1}`, `{`, `[]`, ``, `{"token_ids":null}`,
		`{"token_ids":[1],"bogus":1}`, `{"session_id":"s","token_ids":[1,2]}`, `{"request_id":"x","Request_ID":"y"}`,
		`{"token_ids":[1],"pinned_worker":{"worker_id":1,"extra":{}}}`, `{"worker_id":3,"urls":[]}`} {
		f.Add(seed, uint8(0))
	}
	paths := []string{"/route", "/prefill_done", "/free", "/overlap_scores", "/potential_loads", "/workers"}
	f.Fuzz(func(t *testing.T, body string, which uint8) {
		path := paths[int(which)%len(paths)]
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, localRequest("POST", path, body))
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("POST %s %q: %d %s", path, body, rec.Code, rec.Body.String())
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("POST %s %q: body is not JSON: %q", path, body, rec.Body.String())
		}
	})
}

// BenchmarkHTTPRoute measures routing decisions over real HTTP keep-alive
// connections: 4k-token prompts, 64 workers holding 8 system prompts.
func BenchmarkHTTPRoute(b *testing.B) {
	s, r := newTestServer(b, 64)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	prompts := make([][]byte, 8)
	for g := range prompts {
		var buf bytes.Buffer
		buf.WriteString(`{"update_states":false,"token_ids":[`)
		for i := 0; i < 4096; i++ {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(strconv.Itoa(g*100000 + i))
		}
		buf.WriteString(`]}`)
		prompts[g] = buf.Bytes()
	}
	_ = r
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	var n int64
	b.RunParallel(func(pb *testing.PB) {
		var local []time.Duration
		i := 0
		for pb.Next() {
			i++
			t0 := time.Now()
			resp, err := client.Post(srv.URL+"/route", "application/json", bytes.NewReader(prompts[i%8]))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = drain(resp)
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
			local = append(local, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, local...)
		n += int64(len(local))
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(n)/elapsed.Seconds(), "decisions/s")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
	}
}

func drain(resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(io.Discard, resp.Body)
}

// Recycled token buffers never leak into the next request: a body without
// token_ids is "required", not "empty", and a short prompt after a long
// one decodes exactly.
func TestRouteBuffersAreNotShared(t *testing.T) {
	s, _ := newTestServer(t, 1)
	long := `{"update_states":false,"token_ids":[` + strings.Repeat("7,", 63) + `7]}`
	for i := 0; i < 3; i++ {
		if code, out := do(t, s, "POST", "/route", long); code != 200 {
			t.Fatalf("long prompt: %d %v", code, out)
		}
		code, out := do(t, s, "POST", "/route", `{"update_states":false}`)
		if code != 400 || !strings.Contains(out["error"].(string), "required") {
			t.Fatalf("missing token_ids: %d %v", code, out)
		}
		if code, out := do(t, s, "POST", "/route", `{"update_states":false,"token_ids":[1,2]}`); code != 200 || out["overlap_blocks"] != 0.0 {
			t.Fatalf("short prompt: %d %v", code, out)
		}
	}
}
