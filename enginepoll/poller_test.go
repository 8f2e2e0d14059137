package enginepoll

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/scheduling"
)

// recorder keeps each engine's last reported verdict.
type recorder struct {
	mu   sync.Mutex
	last map[kv.WorkerID]Verdict
	n    int
}

func (r *recorder) onChange(id kv.WorkerID, c Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last[id] = c.Verdict
	r.n++
}

func (r *recorder) verdict(id kv.WorkerID) (Verdict, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.last[id]
	return v, ok
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fastOptions(rec *recorder) Options {
	o := DefaultOptions()
	// A generous timeout: a loaded test machine must not fail healthy
	// engines' polls.
	o.Interval, o.Timeout, o.MaxBackoff = 20*time.Millisecond, 3*time.Second, 80*time.Millisecond
	o.Thresholds = scheduling.BusyThresholds{KVUsage: -1, Waiting: 64}
	o.OnChange = rec.onChange
	o.Logger = slog.New(slog.DiscardHandler)
	return o
}

func mockWorker(t *testing.T, flavor string, dp int) (*mockengine.Server, string) {
	t.Helper()
	cfg := mockengine.DefaultServerConfig()
	cfg.MetricsFlavor = flavor
	cfg.Engine.DPSize = dp
	srv, err := mockengine.NewServer(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return srv, ts.URL
}

// Mock engines with vLLM- and SGLang-named metrics: one whose queue goes
// far over the threshold turns busy, one whose /health fails turns
// unhealthy, and both come back when they recover.
func TestPollerBusyAndUnhealthyEngines(t *testing.T) {
	rec := &recorder{last: map[kv.WorkerID]Verdict{}}
	p, err := New(fastOptions(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	vllm, vllmURL := mockWorker(t, mockengine.MetricsVLLM, 2)
	sglang, sglangURL := mockWorker(t, mockengine.MetricsSGLang, 1)
	p.Set([]Target{{ID: 1, URL: vllmURL, DPSize: 2}, {ID: 2, URL: sglangURL}})

	eventually(t, "both polled with their loads", func() bool {
		st := p.States()
		return len(st) == 2 && len(st[0].Ranks) == 2 && len(st[1].Ranks) == 1 && st[0].MetricsError == "" && st[1].MetricsError == ""
	})
	if rec.n != 0 {
		t.Fatalf("healthy idle engines reported changes: %v", rec.last)
	}

	vllm.SetExtraWaiting(1000)
	eventually(t, "vLLM engine busy on both ranks", func() bool {
		v, ok := rec.verdict(1)
		return ok && v.Healthy && reflect.DeepEqual(v.BusyRanks, []uint32{0, 1})
	})
	sglang.SetHealthy(false)
	eventually(t, "SGLang engine unhealthy", func() bool {
		v, ok := rec.verdict(2)
		return ok && !v.Healthy && v.Reason == "health check: HTTP 503"
	})
	sglang.SetExtraWaiting(1000) // an unhealthy engine's metrics are not read
	time.Sleep(100 * time.Millisecond)
	if v, _ := rec.verdict(2); len(v.BusyRanks) != 0 {
		t.Fatalf("unhealthy engine reported busy: %+v", v)
	}

	vllm.SetExtraWaiting(0)
	sglang.SetExtraWaiting(0)
	sglang.SetHealthy(true)
	eventually(t, "both recovered", func() bool {
		v1, _ := rec.verdict(1)
		v2, _ := rec.verdict(2)
		return v1.Healthy && len(v1.BusyRanks) == 0 && v2.Healthy && len(v2.BusyRanks) == 0
	})
	s := p.Stats()
	if s.Unhealthy < 1 || s.Healthy < 1 || s.Busy < 1 || s.Idle < 1 || s.HealthFailures == 0 {
		t.Fatalf("stats %+v", s)
	}
}

// What an engine must not be able to do to the poller: hang, refuse,
// answer garbage or a huge page. Each is a counted condition.
func TestPollerBadEngines(t *testing.T) {
	rec := &recorder{last: map[kv.WorkerID]Verdict{}}
	o := fastOptions(rec)
	o.Timeout = time.Second
	o.MaxMetricsBytes = 64 << 10
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ok/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /ok/metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "vllm:num_requests_waiting{engine=\"0\"} lots\n")
	})
	mux.HandleFunc("GET /html/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /html/metrics", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "<html>hello</html>") })
	mux.HandleFunc("GET /huge/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /huge/metrics", func(w http.ResponseWriter, _ *http.Request) {
		line := []byte("# filler line of a very large page....................................................\n")
		for n := 0; n <= 64<<10; n += len(line) {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	})
	hang := make(chan struct{})
	mux.HandleFunc("GET /hang/health", func(http.ResponseWriter, *http.Request) { <-hang })
	ts := httptest.NewServer(mux)
	defer ts.Close()
	defer close(hang) // before ts.Close, which waits for handlers
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL := refused.URL
	refused.Close()

	p.Set([]Target{{ID: 1, URL: ts.URL + "/ok"}, {ID: 2, URL: ts.URL + "/html"}, {ID: 3, URL: ts.URL + "/huge"},
		{ID: 4, URL: ts.URL + "/hang"}, {ID: 5, URL: refusedURL}})
	eventually(t, "every condition counted", func() bool {
		s := p.Stats()
		v4, ok4 := rec.verdict(4)
		v5, ok5 := rec.verdict(5)
		return s.MetricsErrors["malformed"] > 0 && s.MetricsErrors["no_load_metrics"] > 0 && s.MetricsErrors["too_large"] > 0 &&
			ok4 && !v4.Healthy && ok5 && !v5.Healthy
	})
	for _, st := range p.States() {
		switch st.ID {
		case 1, 2, 3:
			if !st.Healthy || st.MetricsError == "" || len(st.Ranks) != 0 {
				t.Errorf("engine %d: %+v, want healthy with a metrics error and no load", st.ID, st)
			}
		}
	}
	// Engines that leave are no longer polled or reported.
	p.Set(nil)
	if len(p.States()) != 0 {
		t.Fatal("engines still polled after Set(nil)")
	}
}

func TestNextDelayBacksOff(t *testing.T) {
	p := &Poller{opts: Options{Interval: 100 * time.Millisecond, MaxBackoff: time.Second}}
	e := &engine{p: p}
	want := []time.Duration{100, 100, 200, 400, 800, 1000, 1000}
	for failures, w := range want {
		e.failures = failures
		if got := e.nextDelay(); got != w*time.Millisecond {
			t.Fatalf("failures %d: delay %v, want %v", failures, got, w*time.Millisecond)
		}
	}
	p.opts.Jitter = 0.1
	e.failures = 0
	for range 100 {
		if d := e.nextDelay(); d < 90*time.Millisecond || d > 110*time.Millisecond {
			t.Fatalf("jittered delay %v outside ±10%%", d)
		}
	}
}

func TestFailureThreshold(t *testing.T) {
	rec := &recorder{last: map[kv.WorkerID]Verdict{}}
	o := fastOptions(rec)
	o.FailureThreshold = 3
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srv, url := mockWorker(t, mockengine.MetricsVLLM, 1)
	srv.SetHealthy(false)
	p.Set([]Target{{ID: 1, URL: url}})
	eventually(t, "unhealthy after 3 failures", func() bool { v, ok := rec.verdict(1); return ok && !v.Healthy })
	if s := p.Stats(); s.HealthFailures < 3 {
		t.Fatalf("unhealthy after %d failures", s.HealthFailures)
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, mut := range map[string]func(*Options){
		"interval":  func(o *Options) { o.Interval = 0 },
		"backoff":   func(o *Options) { o.MaxBackoff = o.Interval / 2 },
		"jitter":    func(o *Options) { o.Jitter = 1 },
		"threshold": func(o *Options) { o.FailureThreshold = 0 },
		"kv usage":  func(o *Options) { o.Thresholds.KVUsage = 85 },
	} {
		o := DefaultOptions()
		mut(&o)
		if _, err := New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
